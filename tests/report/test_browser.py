"""The demo's report.html in a real browser (Debian's headless Chromium, driven over the
DevTools protocol): it loads without console errors, every SVG has a size, and the
verdict badge says what report.json says. Skipped, with the reason, without Chromium.

Set ``SPECPROXY_SCREENSHOT=PATH`` to keep the page's screenshot there (out of git).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from specproxy.cli.demo import DemoSettings, run_demo
from tests.report.cdp import Page, chromium, headless_page

BINARY = chromium()
pytestmark = pytest.mark.skipif(
    BINARY is None, reason="no chromium on PATH (apt-get install -y chromium; .ci/run does)"
)

_PROBE = """JSON.stringify({
  svgs: [...document.querySelectorAll('svg')].map(s => {
    const r = s.getBoundingClientRect(); return [r.width, r.height]; }),
  badge: (() => { const b = document.getElementById('verdict-badge');
    return b ? {verdict: b.dataset.verdict, text: b.innerText} : null; })(),
  height: document.documentElement.scrollHeight,
})"""


def _errors(page: Page) -> list[dict[str, Any]]:
    out = []
    for event in page.events:
        method, params = event.get("method"), event.get("params", {})
        console_error = method == "Runtime.consoleAPICalled" and params.get("type") == "error"
        if method == "Runtime.exceptionThrown" or console_error:
            out.append(params)
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            out.append(params["entry"])
    return out


async def _open(page: Page, url: str) -> dict[str, Any]:
    for domain in ("Page", "Runtime", "Log"):
        await page.call(f"{domain}.enable")
    loaded = page.expect("Page.loadEventFired")
    await page.call("Page.navigate", url=url)
    await loaded
    probe: dict[str, Any] = json.loads(await page.evaluate(_PROBE))
    return probe


async def _screenshot(page: Page, height: int, path: Path) -> None:
    await page.call(
        "Emulation.setDeviceMetricsOverride",
        width=1400,
        height=min(height, 16000),
        deviceScaleFactor=1,
        mobile=False,
    )
    shot = await page.call("Page.captureScreenshot", format="png")
    path.write_bytes(base64.b64decode(shot["data"]))


async def test_demo_report_in_chromium(tmp_path: Path) -> None:
    """The demo report loads error-free, draws every SVG and badges report.json's verdict."""
    assert BINARY is not None
    settings = DemoSettings(requests=24, rate=24.0, output_len=32, run_dir=tmp_path / "demo")
    run_dir, _text = await run_demo(settings)
    report = json.loads((run_dir / "report.json").read_text())
    async with headless_page(BINARY, tmp_path / "profile") as page:
        probe = await _open(page, (run_dir / "report.html").as_uri())
        shot = Path(os.environ.get("SPECPROXY_SCREENSHOT") or tmp_path / "report.png")
        await _screenshot(page, probe["height"], shot)
        errors = _errors(page)
    assert errors == []
    assert len(probe["svgs"]) >= 8
    assert all(w > 0 and h > 0 for w, h in probe["svgs"]), probe["svgs"]
    label = report["verdict"]["label"]
    assert probe["badge"]["verdict"] == label
    assert probe["badge"]["text"].startswith(label.replace("_", " ").upper())
    assert f"over {report['verdict']['n_pairs']} pairs" in probe["badge"]["text"]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_the_probe_sees_errors_and_empty_svgs(tmp_path: Path) -> None:
    """The checks above can fail: a console error, a thrown exception and a 0-size SVG show."""
    assert BINARY is not None
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><body><svg width='0' height='0'></svg>"
        "<script>console.error('broken'); undefinedFunction();</script></body></html>"
    )
    async with headless_page(BINARY, tmp_path / "profile") as page:
        probe = await _open(page, bad.as_uri())
        errors = _errors(page)
    assert len(errors) == 2
    assert probe["svgs"] == [[0, 0]]
    assert probe["badge"] is None
