"""The Prometheus text parser against hand-written edge cases and real SGLang/llama.cpp scrapes."""

from __future__ import annotations

import math

import pytest

from specproxy.core.protocol.prometheus import counter_delta, parse_exposition
from specproxy.errors import ProtocolError
from specproxy.testing.captures import LLAMACPP, LLAMACPP_CONFIGS, SGLANG_SERVERS, sglang_exchange

_TEXT = """\
# HELP http_requests_total The total number of HTTP requests. A \\\\ backslash\\nand newline.
# TYPE http_requests_total counter
http_requests_total{method="post",code="200"} 1027 1395066363000
http_requests_total{method="post",code="400"}    3 1395066363000
# A normal comment.
msdos_file_access_time_seconds{path="C:\\\\DIR\\\\FILE.TXT",error="Cannot find file:\\n\\"FILE.TXT\\""} 1.458255915e9
metric_without_timestamp_and_labels 12.47
something_weird{problem="division by zero"} +Inf
negative{sign="-"} -Inf
missing NaN
# TYPE rpc_duration_seconds histogram
rpc_duration_seconds_bucket{le="+Inf",} 144320
trailing_comma{a="x",} 1
"""


def test_parses_labels_escapes_special_values_and_metadata() -> None:
    """Escaped label values, +Inf/-Inf/NaN, timestamps, trailing commas and HELP/TYPE all parse."""
    expo = parse_exposition(_TEXT)
    assert expo.types == {"http_requests_total": "counter", "rpc_duration_seconds": "histogram"}
    assert expo.helps["http_requests_total"] == (
        "The total number of HTTP requests. A \\ backslash\nand newline."
    )
    first = expo.named("http_requests_total")[0]
    assert first.labels == (("code", "200"), ("method", "post"))
    assert first.value == 1027
    assert first.timestamp_ms == 1395066363000
    dos = expo.named("msdos_file_access_time_seconds")[0]
    assert dos.label("path") == "C:\\DIR\\FILE.TXT"
    assert dos.label("error") == 'Cannot find file:\n"FILE.TXT"'
    assert expo.named("something_weird")[0].value == math.inf
    assert expo.named("negative")[0].value == -math.inf
    assert math.isnan(expo.named("missing")[0].value)
    assert expo.named("rpc_duration_seconds_bucket")[0].label("le") == "+Inf"
    assert expo.total("http_requests_total") == 1030
    assert expo.total("http_requests_total", code="400") == 3
    assert expo.total("missing") is None
    assert expo.total("absent") is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('bad{label="x} 1', "unterminated"),
        ("no_value", "value"),
        ('x{1a="b"} 1', "label name"),
        ("x{a=b} 1", "quoted"),
        ("x 1 2 3", "timestamp"),
        ("x abc", "could not convert"),
        ("# TYPE x frobnicator", "metric type"),
        ('x{a="1",a="2"} 1', "twice"),
    ],
)
def test_malformed_lines_raise_with_line_number(line: str, problem: str) -> None:
    """A malformed line raises ProtocolError naming its 1-based line and the problem."""
    with pytest.raises(ProtocolError, match=rf"line 2: .*{problem}"):
        parse_exposition("ok 1\n" + line + "\n")


@pytest.mark.parametrize("server", SGLANG_SERVERS)
def test_real_sglang_scrapes_parse_and_hold_the_documented_series(server: str) -> None:
    """Every SGLang 0.5.16 /metrics capture parses; spec counters exist only on spec servers."""
    _, before = sglang_exchange(server, "metrics_before")
    _, after = sglang_exchange(server, "metrics_after")
    a = parse_exposition(before.body.decode())
    b = parse_exposition(after.body.decode())
    assert len(b.samples) > 300
    assert b.types["sglang:generation_tokens_total"] == "counter"
    assert any(s.label("le") == "+Inf" for s in b.samples)
    assert any(math.isnan(s.value) for s in b.samples)  # sglang:fwd_occupancy NaN
    # The eight fixture requests each produced 64 tokens (README: 64 tokens per request).
    assert counter_delta(a, b, "sglang:generation_tokens_total") == 8 * 64
    has_verify = b.total("sglang:spec_verify_calls_total") is not None
    assert has_verify is (not server.endswith(("base", "base_b", "base_c")))


def test_sa_copy_after_scrape_has_the_counter_value_the_readme_quotes() -> None:
    """The sa_copy scrape after the fixtures reads spec_verify_calls_total 383 and accept length 1.0625."""
    _, after = sglang_exchange("run_a_init0.1/sa_copy", "metrics_after")
    expo = parse_exposition(after.body.decode())
    assert expo.total("sglang:spec_verify_calls_total") == 383
    assert expo.total("sglang:spec_accept_length") == 1.0625


@pytest.mark.parametrize("config", LLAMACPP_CONFIGS)
def test_real_llamacpp_scrapes_parse(config: str) -> None:
    """Every llama.cpp /metrics capture parses, with 2944 predicted tokens after the run."""
    before = parse_exposition((LLAMACPP / config / "metrics_before.prom").read_text())
    after = parse_exposition((LLAMACPP / config / "metrics_after.prom").read_text())
    assert before.total("llamacpp:tokens_predicted_total") == 0
    # 6 capture requests of 64 tokens and 20 bench requests of 128 tokens (README).
    assert after.total("llamacpp:tokens_predicted_total") == 6 * 64 + 20 * 128
    assert after.types["llamacpp:n_decode_total"] == "counter"


def test_counter_delta_treats_a_missing_start_as_zero_and_a_reset_as_unknown() -> None:
    """A series born inside the window counts from 0; a counter that went down gives None."""
    before = parse_exposition("a_total 5\n")
    after = parse_exposition('a_total 7\nb_total{x="1"} 2\nb_total{x="2"} 3\n')
    assert counter_delta(before, after, "a_total") == 2
    assert counter_delta(before, after, "b_total") == 5
    assert counter_delta(after, before, "a_total") is None
    assert counter_delta(before, after, "c_total") is None
