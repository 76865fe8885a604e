"""The pure side policy: mirror, passthrough, split by weight, sticky keys and forced sides."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specproxy.core.load.sides import Decision, SidePolicy, stable_unit, sticky_user
from specproxy.core.protocol.headers import (
    HeaderFacts,
    SharedHeaders,
    header_facts,
    parse_forced_side,
)
from specproxy.core.records.model import Role, SendMode


def test_mirror_serves_the_primary_and_shadows_the_other() -> None:
    """Mirror mode answers from the primary and sends the copy to the other side."""
    policy = SidePolicy(SendMode.MIRROR, Role.BASELINE, 0.5)
    assert policy.decide() == Decision(Role.BASELINE, Role.CANDIDATE)
    assert policy.decide(forced=Role.CANDIDATE) == Decision(Role.CANDIDATE, Role.BASELINE)


def test_passthrough_has_no_shadow() -> None:
    """Passthrough sends to the primary (or the forced side) and nowhere else."""
    policy = SidePolicy(SendMode.PASSTHROUGH, Role.CANDIDATE, 0.5)
    assert policy.decide() == Decision(Role.CANDIDATE)
    assert policy.decide(forced=Role.BASELINE) == Decision(Role.BASELINE)


@pytest.mark.parametrize(("split", "side"), [(0.0, Role.BASELINE), (1.0, Role.CANDIDATE)])
def test_split_extremes_always_pick_one_side(split: float, side: Role) -> None:
    """A split of 0 sends everything to the baseline and 1 everything to the candidate."""
    policy = SidePolicy(SendMode.SPLIT, Role.BASELINE, split, seed=3)
    assert {policy.decide().primary for _ in range(200)} == {side}


def test_split_share_follows_the_weight_and_the_seed() -> None:
    """About ``split`` of requests go to the candidate, and one seed gives one sequence."""
    first = SidePolicy(SendMode.SPLIT, Role.BASELINE, 0.25, seed=11)
    again = SidePolicy(SendMode.SPLIT, Role.BASELINE, 0.25, seed=11)
    picks = [first.decide().primary for _ in range(4000)]
    assert picks == [again.decide().primary for _ in range(4000)]
    share = picks.count(Role.CANDIDATE) / len(picks)
    assert 0.22 < share < 0.28
    assert all(first.decide().shadow is None for _ in range(10))


@given(st.text(min_size=1), st.floats(min_value=0.0, max_value=1.0))
def test_sticky_key_always_lands_on_the_same_side(key: str, split: float) -> None:
    """The same sticky key gives the same side in any policy instance, whatever its seed."""
    one = SidePolicy(SendMode.SPLIT, Role.BASELINE, split, seed=1)
    two = SidePolicy(SendMode.SPLIT, Role.BASELINE, split, seed=2)
    assert one.decide(sticky=key) == two.decide(sticky=key) == one.decide(sticky=key)
    assert 0.0 <= stable_unit(key) < 1.0


def test_forced_side_wins_over_sticky_in_split() -> None:
    """The x-specproxy-side header overrides the sticky hash in split mode."""
    policy = SidePolicy(SendMode.SPLIT, Role.BASELINE, 0.0)
    assert policy.decide(forced=Role.CANDIDATE, sticky="user-1") == Decision(Role.CANDIDATE)


def test_forced_side_header_values() -> None:
    """Only 'baseline' or 'candidate' (any case) are accepted; other values name the header."""
    assert parse_forced_side(None) is None
    assert parse_forced_side(" Candidate ") is Role.CANDIDATE
    with pytest.raises(ValueError, match="x-specproxy-side must be 'baseline' or 'candidate'"):
        parse_forced_side("both")


def test_sticky_user_is_a_non_empty_string_user_field() -> None:
    """The body's user field is a sticky key only when it is a non-empty string."""
    assert sticky_user({"user": "alice"}) == "alice"
    assert sticky_user({"user": 3}) is None
    assert sticky_user({"user": ""}) is None
    assert sticky_user({}) is None


def test_shared_upstream_headers_each_get_their_own_derived_store() -> None:
    """Facts for a known head carry ``SharedHeaders`` with an empty ``derived`` of their
    own (a backend keeps their upstream head there); other facts carry a plain dict."""
    headers = {"X-Test": "1", "x-specproxy-side": "candidate", "Content-Length": "2"}
    facts = (
        header_facts(headers, keep_auth=True, sticky_header=None, shared=s)
        for s in (True, True, False)
    )
    one, two, plain = facts
    assert isinstance(one, HeaderFacts) and isinstance(two, HeaderFacts)
    assert isinstance(plain, HeaderFacts) and type(plain.upstream) is dict
    assert type(one.upstream) is SharedHeaders and one.upstream == {"X-Test": "1"}
    assert one.upstream.derived == {} and one.upstream.derived is not two.upstream.derived
    assert one.forced is Role.CANDIDATE
