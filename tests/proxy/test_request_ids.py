"""``app.RequestIds``: 16 hex digits, unique, a new prefix per process and after 2**32."""

from __future__ import annotations

import os
import re

from specproxy.runtime import RequestIds


def test_ids_are_sixteen_hex_digits_and_unique() -> None:
    ids = RequestIds()
    drawn = [ids() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{16}", x) for x in drawn)
    assert len(set(drawn)) == len(drawn)
    assert len({x[:8] for x in drawn}) == 1  # one prefix, a counter after it


def test_a_new_prefix_after_the_counter_runs_out_and_after_reset() -> None:
    ids = RequestIds()
    first = ids()
    ids._next = (1 << 32) - 1
    last = ids()
    assert last == first[:8] + "ffffffff"
    after = ids()
    assert after[8:] == "00000000" and after != first  # a fresh prefix, counting from zero
    ids.reset()
    assert ids()[8:] == "00000000"


def test_a_forked_child_draws_its_own_prefix() -> None:
    ids = RequestIds()
    parent = ids()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, ids().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child[8:] == "00000000"
    assert child != parent
