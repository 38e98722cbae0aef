"""report.html in a real headless browser (Debian's chromium, driven by playwright): the three embedded plots (top-1
against flash, arena and instructions) decode (naturalWidth > 0) and the table has one row per config."""
from __future__ import annotations

import shutil

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def test_report_html_in_chromium(small_sweep):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra (setup.sh)")
    if not shutil.which("chromium"):
        pytest.skip("no chromium on PATH (setup.sh installs Debian's chromium with apt)")
    html = small_sweep["out"] / "report.html"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
            names = page.eval_on_selector_all("table#configs tbody tr td.name", "tds => tds.map(t => t.textContent)")
            heading = page.text_content("h1")
        finally:
            browser.close()
    assert len(widths) == 3 and all(w > 0 for w in widths), widths
    assert names == [c["name"] for c in small_sweep["report"]["configs"]]
    assert "kws_dscnn.onnx" in heading
