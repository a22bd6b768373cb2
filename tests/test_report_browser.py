"""The report as a person sees it: headless Chromium opens report.html (no network), and the
decision table, budget burn-down, trajectories, heat map and IFEval guard chart render."""

from __future__ import annotations

import re

import pytest

from support.browser import WIDTH, dump_dom, screenshot
from support.graph_fakes import run_fake

pytestmark = pytest.mark.slow


def test_report_renders_in_headless_chromium(tmp_path):
    from PIL import Image

    run_dir = tmp_path / "E-fake"
    run_fake(run_dir)
    dom = dump_dom(run_dir / "report.html")
    assert 'data-loaded="1"' in dom  # the page's load handler ran
    rendered = dict(re.findall(r'<figure id="([^"]+)"><img [^>]*?data-natural-width="(\d+)"[^>]*?data-ok="true"', dom))
    assert set(rendered) == {"burn-down", "trajectories", "heatmap", "ifeval-guard"}, rendered
    assert all(int(w) >= 700 for w in rendered.values())
    table = re.search(r'<table id="decisions">.*?</table>', dom, re.S).group(0)
    assert len(re.findall(r"<tr>", table)) == 1 + 6  # header + one row per decision
    png = screenshot(run_dir / "report.html", tmp_path / "shot.png", height=2000)
    img = Image.open(png).convert("L")
    assert img.size == (WIDTH, 2000)
    hist = img.histogram()
    assert sum(hist[:128]) > 0.01 * WIDTH * 2000  # text and plot lines, not a blank page
    assert sum(1 for n in hist if n) > 16  # shades of figures, not a flat colour
