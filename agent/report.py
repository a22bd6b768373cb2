"""runs/ID/report.md and report.html: what the episode decided, spent and changed.

Pure over what the run stored (bank events, ledger, evaluation results, gate verdicts): a
report can be rewritten at any time without running a model. Sections: decision table
(features, action, rule), ledger and budget burn-down, trial fidelity, trajectory of every
suite across promotions, the CapTrack heat map (evaluators/heatmap.py, when present), and
the IFEval guard over time.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from experience_bank.records import Event
from experience_bank.results import SuiteResult


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    return str(v)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_fmt(c).replace("|", "/") for c in r) + " |" for r in rows]
    return out


def _results(run_dir: Path, sha: str, split: str) -> dict[str, SuiteResult] | None:
    path = run_dir / "evals" / f"{sha[:16]}-{split}" / "results.json"
    if not path.exists():
        return None
    return {k: SuiteResult.model_validate_json(json.dumps(v)) for k, v in json.loads(path.read_text()).items()}


def decision_rows(events: list[Event]) -> list[list[Any]]:
    rows = []
    for e in events:
        f = e.decision.features
        rows.append([e.seq, e.candidate_id, "new" if f.is_new else f.grade, f.S, f.A, f.H, f.Q, f.nu, f.chi,
                     e.action, e.decision.rule, e.outcome, round(e.cost_device_hours, 4), e.reason[:80]])
    return rows


def burn_down(events: list[Event], budget_h: float, spent_h: float) -> list[list[Any]]:
    left, rows = budget_h, [["start", "", 0.0, budget_h]]
    for e in events:
        left -= e.cost_device_hours
        rows.append([e.seq, e.candidate_id, e.cost_device_hours, round(left, 4)])
    rows.append(["ledger total (incl. shared evaluations)", "", round(spent_h, 4), round(budget_h - spent_h, 4)])
    return rows


def trajectory(run_dir: Path, manifest: dict, events: list[Event]) -> tuple[list[str], list[list[Any]]]:
    """Adoption metrics of the initial parent and of every promoted child, in order."""
    shas = [("initial", manifest["initial"]["sha256"])]
    for e in events:
        if e.outcome == "promoted":
            step = run_dir / "steps" / e.decision.decision_hash[:16] / "verdict.json"
            shas.append((e.candidate_id, json.loads(step.read_text())["child_sha256"]))
    cols: list[str] = []
    rows = []
    for label, sha in shas:
        res = _results(run_dir, sha, "adoption") or {}
        flat = {f"{s}.{k}": v for s, r in res.items() for k, v in r.metrics.items()}
        cols += [c for c in flat if c not in cols]
        rows.append((label, flat))
    return ["model"] + cols, [[label] + [flat.get(c) for c in cols] for label, flat in rows]


def ifeval_guard(events: list[Event], manifest: dict) -> list[list[Any]]:
    drop = manifest.get("gate", {}).get("ifeval_max_drop_pp", 2.0)
    rows = []
    for e in events:
        vals = {k: v for k, v in e.metrics.items() if k.startswith("ifeval.")}
        if vals:
            rows.append([e.seq, e.candidate_id, ", ".join(f"{k}={v:.1f}" for k, v in sorted(vals.items())), e.outcome])
    return rows or [["–", "no child was evaluated", f"guard: at most {drop} pp below the initial parent", ""]]


def _heatmap(ctx: Any, events: list[Event]) -> list[str]:
    """Groups and sub-capabilities x every child that reached the gate (drift % vs the initial parent)."""
    from evaluators.heatmap import write_heatmap  # noqa: PLC0415 (matplotlib)

    run_dir = ctx.run_dir
    initial = _results(run_dir, ctx.manifest["initial"]["sha256"], "adoption")
    table = {}
    for e in events:
        v = run_dir / "steps" / e.decision.decision_hash[:16] / "verdict.json"
        if initial is not None and v.exists():
            child = _results(run_dir, json.loads(v.read_text())["child_sha256"], "adoption")
            table[f"{e.seq}:{e.candidate_id}"] = ctx.ports.captrack(initial, child)
    if not table:
        return ["(no child reached the gate: no heat map)"]
    write_heatmap(table, run_dir / "captrack_heatmap.png", run_dir / "captrack_heatmap.json",
                  title=f"CapTrack drift vs the initial parent, episode {ctx.episode_id}")
    return ["![CapTrack heat map](captrack_heatmap.png)", "", "Matrix: `captrack_heatmap.json`."]


def write_report(ctx: Any, state: dict[str, Any]) -> Path:
    """Write report.md and report.html into the run directory; return the .md path."""
    run_dir, manifest = ctx.run_dir, ctx.manifest
    events = ctx.bank.events(ctx.episode_id)
    spent = ctx.ledger.spent(ctx.episode_id)
    proposals = run_dir / "proposals.json"
    lines = [f"# Episode {ctx.episode_id}", "",
             f"Manifest `{state.get('manifest_hash', '')[:16]}`; stopped: **{state.get('stop_reason', '')}**; "
             f"promotions: {state.get('stage', 0)}; new library version: {state.get('library_version', '–')}; "
             f"spent {spent:.3f} of {manifest['budget_device_hours']:.3f} device-hours.", "",
             "## Decisions (features, action, rule)", ""]
    lines += _table(["seq", "candidate", "grade", "S", "A", "H", "Q", "nu", "chi", "action", "rule", "outcome",
                     "cost h", "reason"], decision_rows(events))
    if proposals.exists():
        lines += ["", "## LLM proposals", ""]
        lines += _table(["#", "status", "reason"], [[p["index"], p["status"], p["reason"]]
                                                   for p in json.loads(proposals.read_text())])
    lines += ["", "## Ledger and budget burn-down", ""]
    lines += _table(["seq", "candidate", "charged h", "left h"], burn_down(events, manifest["budget_device_hours"], spent))
    lines += ["", "## Trial fidelity (trial vs full run, where both ran)", ""]
    fid = [[e.candidate_id, e.fidelity["trial_delta_val"], e.fidelity["full_delta_adoption"]] for e in events if e.fidelity]
    lines += _table(["candidate", "trial Δval pp", "full Δadoption pp"], fid) if fid else ["(no candidate ran both)"]
    lines += ["", "## Trajectory of every suite across promotions (adoption split)", ""]
    lines += _table(*trajectory(run_dir, manifest, events))
    lines += ["", "## CapTrack heat map", ""] + _heatmap(ctx, events)
    lines += ["", "## IFEval guard over time", ""]
    lines += _table(["seq", "candidate", "values", "outcome"], ifeval_guard(events, manifest))
    md = "\n".join(lines) + "\n"
    (run_dir / "report.md").write_text(md, encoding="utf-8")
    (run_dir / "report.html").write_text(_html(md, ctx.episode_id), encoding="utf-8")
    return run_dir / "report.md"


def _html(md: str, title: str) -> str:
    """A plain HTML rendering of the markdown (tables, headings, images)."""
    body, in_table = [], False
    for line in md.splitlines():
        if line.startswith("|"):
            if line.startswith("|---"):
                continue
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            body.append(("<table>" if not in_table else "") + "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            in_table = True
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.startswith("![") and "](" in line:
            body.append(f'<img src="{html.escape(line.split("](")[1].rstrip(")"))}">')
        elif line:
            body.append(f"<p>{html.escape(line)}</p>")
    if in_table:
        body.append("</table>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>td{border:1px solid #ccc;padding:2px 6px;font:12px monospace}table{border-collapse:collapse}"
            "</style></head><body>" + "\n".join(body) + "</body></html>\n")
