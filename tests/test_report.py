"""report.md / report.html of a (fake-boundary) episode: one self-contained HTML file whose
figures are embedded PNGs of the numbers the tables show, and a heat map that explains its rows."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import pytest

from support.graph_fakes import run_fake


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "E-fake"
    run_fake(path)
    return path


def _figures(page: str) -> dict[str, bytes]:
    found = re.findall(r'<figure id="([^"]+)"><img alt="[^"]*" src="data:image/png;base64,([^"]+)"', page)
    return {fid: base64.b64decode(data) for fid, data in found}


def test_html_is_self_contained_with_every_chart(run_dir):
    from PIL import Image

    page = (run_dir / "report.html").read_text(encoding="utf-8")
    figures = _figures(page)
    assert set(figures) == {"burn-down", "trajectories", "heatmap", "ifeval-guard"}
    for fid, png in figures.items():
        width, height = Image.open(io.BytesIO(png)).size
        assert 700 <= width <= 1100 and height >= 250, (fid, width, height)  # fits a 1366 px page unscaled
    srcs = re.findall(r'\b(?:src|href)="([^"]*)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)  # nothing fetched, no file linked
    assert "http" not in page.replace("http-equiv", "")
    # the heat map in the page is the file beside report.md, byte for byte
    assert figures["heatmap"] == (run_dir / "captrack_heatmap.png").read_bytes()


def test_tables_hold_the_recorded_numbers(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    decisions = re.search(r'<table id="decisions">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", decisions)
    assert [re.findall(r"<td>(.*?)</td>", r)[11] for r in rows] == [
        "rejected", "promoted", "rolled_back", "trial_failed", "promoted", "promoted"]
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "| initial | 50.00 | 40.00 |" in md and "| S06 | 50.00 | 51.00 |" in md  # fake gains 5+2+4 pp
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (run_dir / link).is_file(), link


def test_heatmap_rows_are_explained(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    legend = re.search(r'<table id="heatmap-legend">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    rows = {cells[0]: cells[1:] for cells in (re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", legend))}
    assert rows["CAN/C1"][0] == "knowledge and skills"
    assert "captrack.can_arith" in rows["CAN/C1"][1] and "captrack.can_paraphrase" not in rows["CAN/C1"][1]
    assert "captrack.can_paraphrase" in rows["CAN"][1]  # a group lists every metric of its subs


def test_heatmap_title_and_labels_fit_inside_the_figure():
    from evaluators.heatmap import heatmap_data, heatmap_figure

    data = heatmap_data({f"{i}:S0{i}": {"CAN": -3.0, "CAN/C1": -16.7, "HOW/H2": None} for i in range(1, 4)})
    fig = heatmap_figure(data, "CapTrack drift vs the initial parent, episode ep-20261130-021003-with-a-long-name")
    fig.canvas.draw()
    box = fig.bbox
    for text in [fig._suptitle, *fig.axes[0].get_yticklabels()]:
        ext = text.get_window_extent()
        assert box.x0 <= ext.x0 and ext.x1 <= box.x1 and ext.y1 <= box.y1, (text.get_text(), ext, box)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        "CAN latent competence", "CAN/C1 knowledge and skills", "HOW/H2 output format / JSON"]


def test_compatibility_of_the_library_with_each_parent(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    body = re.search(r'<table id="compatibility">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", body)]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]  # the initial parent and the three promoted children
    for stage, _, n, a, parent, data, h, _ in rows:
        for counts in (a, parent, data):  # every record is counted once in each distribution
            assert sum(int(c.split("×")[1]) for c in counts.split(", ")) == int(n) > 0
        assert 0 <= int(h) <= int(n)


def test_the_endpoint_section_lists_the_final_parents_test_scores(run_dir):
    import json

    page = (run_dir / "report.html").read_text(encoding="utf-8")
    body = re.search(r'<table id="endpoint">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    cells = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", body)]
    final = [p for p in (run_dir / "evals").iterdir() if p.name.endswith("-test")]
    (stored,) = [json.loads((p / "results.json").read_text()) for p in final]
    assert [(c[0], c[1], float(c[2])) for c in cells] == sorted(
        (suite, m, v) for suite, r in stored.items() for m, v in r["metrics"].items())


def test_the_time_section_refuses_walls_the_episode_did_not_have(run_dir):
    """The fake trainers report 1.5 s runs they never spent: the section says why it has no split
    (the real split is asserted on real episodes in tests/test_runcache_episode.py)."""
    from agent.views.report import TIME_SECTION

    part = (run_dir / "report.md").read_text(encoding="utf-8").split(f"## {TIME_SECTION}")[1]
    assert "(not computed: the ledger charges" in part and "| part |" not in part


def test_the_report_is_rebuilt_from_a_copy_of_the_run_directory_alone(run_dir, tmp_path, monkeypatch):
    """No world (an empty AGENT_CACHE), no bank, no ports: report_inputs.json and the run
    directory's other files give the same report.md and report.html, byte for byte."""
    import shutil

    from agent.cli.main import main

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "empty-cache"))
    copy = tmp_path / "elsewhere" / run_dir.name
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("bank.sqlite*", "*.png"))
    (copy / "report.md").write_text("stale")
    (copy / "report.html").unlink()
    assert not (copy / "bank.sqlite").exists()
    assert main(["runs", "report", str(copy)]) == 0
    assert (copy / "report.md").read_bytes() == (run_dir / "report.md").read_bytes()
    assert (copy / "report.html").read_bytes() == (run_dir / "report.html").read_bytes()
    assert (copy / "captrack_heatmap.json").read_bytes() == (run_dir / "captrack_heatmap.json").read_bytes()


def test_an_unfinished_run_has_no_report_to_rebuild(run_dir, tmp_path, capsys):
    import shutil

    from agent.cli.main import main

    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    (copy / "report.md").unlink()
    assert main(["runs", "report", str(copy)]) == 2
    assert "has not finished" in capsys.readouterr().err
