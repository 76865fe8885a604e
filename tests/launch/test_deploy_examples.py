"""The shipped deploy/ examples load, are marked unvalidated, and use real options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specproxy.cli.serve import command as serve_command
from specproxy.core.records.model import Role
from specproxy.launch.description import load_description

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DESCRIPTIONS = sorted((DEPLOY / "sglang").glob("*.toml"))


@pytest.mark.parametrize("path", DESCRIPTIONS, ids=lambda p: p.stem)
def test_every_example_loads_and_states_whether_it_was_validated(path: Path) -> None:
    """Each description loads and explains its validated flag in a comment; only a measured
    run (recorded in docs/validation) may set it true."""
    desc = load_description(path)
    flag = "true" if desc.validated else "false"
    assert re.search(rf"^#.*validated = {flag}", path.read_text(), re.MULTILINE)
    if desc.validated:
        assert path.stem in (DEPLOY.parent / "docs" / "validation" / "README.md").read_text()
    base, cand = desc.command(Role.BASELINE), desc.command(Role.CANDIDATE)
    assert "--max-running-requests" in base
    assert "--random-seed" in cand
    assert base[base.index("--port") + 1] != cand[cand.index("--port") + 1]


def test_the_examples_cover_the_known_combinations() -> None:
    """EAGLE3 on Llama, NEXTN on DeepSeek, NGRAM, a STANDALONE draft, and the kit's tiny pair."""
    found = {}
    for path in DESCRIPTIONS:
        desc = load_description(path)
        found[path.stem] = (desc.model_path, desc.candidate_args["speculative-algorithm"])
    algorithms = {algo for _, algo in found.values()}
    assert {"EAGLE3", "NEXTN", "NGRAM", "STANDALONE"} <= algorithms
    assert any("Llama" in model and algo == "EAGLE3" for model, algo in found.values())
    assert any("DeepSeek" in model and algo == "NEXTN" for model, algo in found.values())
    assert found["tiny-standalone"][0].endswith("attn_off/target")


def test_the_kubernetes_proxy_command_uses_real_serve_options() -> None:
    """Every --option in the Deployment's `specproxy serve` command exists in the CLI."""
    manifest = (DEPLOY / "k8s" / "specproxy-proxy.yaml").read_text()
    command = manifest[manifest.index("exec specproxy serve") :].split("ports:")[0]
    used = set(re.findall(r"(--[a-z][a-z-]*)", command))
    known = {opt for param in serve_command.params for opt in param.opts}
    assert used
    assert used <= known, used - known


def test_the_scrape_config_targets_the_metrics_route() -> None:
    """The Prometheus job scrapes /_specproxy/metrics on pods labelled app=specproxy."""
    text = (DEPLOY / "k8s" / "prometheus-scrape.yaml").read_text()
    assert "metrics_path: /_specproxy/metrics" in text
    assert "regex: specproxy" in text
