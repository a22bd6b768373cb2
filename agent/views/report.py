"""runs/ID/report.md and report.html: what the episode decided, spent and changed.

It reads the run directory alone (manifest, ledger, evaluation results, gate verdicts, and
report_inputs.json, where the loop's report node stored what only the live episode could
compute: the events, the library's compatibility with each parent and each child's CapTrack
drift), so `agent runs report` rebuilds it, byte for byte, from a copy of the run directory with
no world and no bank. It runs no model and asks no world. Sections: decision table
(features, action, rule), ledger and budget burn-down, trial fidelity, trajectory of every
suite across promotions, the CapTrack heat map (evaluators/heatmap.py), the IFEval guard
over time and each gate check beside its paired noise (n, SE, McNemar p). Both files render
the same sections: report.md links the figures as PNG files beside it, report.html embeds
them (base64), so the HTML is one self-contained file that reads at a laptop width (tables
scroll sideways inside their own box, figures shrink): agent/views/render.py renders both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evaluators.heatmap import legend, write_heatmap
from experience_bank.errors import BadInput
from experience_bank.decisions import Event
from experience_bank.results import GateCheck, GateVerdict, SuiteResult

from agent.run.manifest import ENDPOINT_SPLIT, Manifest
from agent.run.report_inputs import Compatibility, RefitSummary, ReportInputs
from agent.run.rundir import RunDir
from agent.run.approvals import report_rows
from agent.views.charts import burn_down_chart, ifeval_chart, trajectory_chart
from agent.views.render import Figure, Section, Table, markdown, page
from agent.views.timing import time_breakdown


def _results(rd: RunDir, sha: str, split: str) -> dict[str, SuiteResult] | None:
    return rd.evaluation(sha, split) if rd.has_evaluation(sha, split) else None


def _child_sha(rd: RunDir, e: Event) -> str | None:
    """The child the gate judged for this event, if one reached the gate."""
    verdict = rd.verdict(e.decision.decision_hash)
    return None if verdict is None else verdict.child_sha256


def decision_rows(events: list[Event]) -> list[list[Any]]:
    rows = []
    for e in events:
        f = e.decision.features
        rows.append([e.seq, e.candidate_id, "new" if f.is_new else f.grade, f.S, f.A, f.H, f.Q, f.nu, f.chi,
                     e.action, e.decision.rule, e.outcome, round(e.cost_device_hours, 4), e.reason[:80]])
    return rows


def gonogo_rows(events: list[Event]) -> list[list[Any]]:
    """Every trial a learned rule decided: its own verdict, the reason it acted on, the contributions."""
    return [[e.seq, e.candidate_id, e.trial_verdict, e.reason[:160],
             "; ".join(f"{name} {value:+.2f}" for name, value in e.trial_contributions)]
            for e in events if e.trial_contributions]


def skip_rows(events: list[Event]) -> list[list[Any]]:
    """Every trial bcit_predictive skipped: the prior-only go/no-go's P(harmful) against its threshold
    and its P(beneficial) (absent from decisions of models without the floor; the decision's numbers),
    and its largest contributions."""
    return [[e.seq, e.candidate_id, round(e.decision.numbers["prior_p_harmful"], 3),
             e.decision.numbers["prior_threshold"],
             round(e.decision.numbers["prior_p_beneficial"], 3) if "prior_p_beneficial" in e.decision.numbers else "",
             e.outcome,
             "; ".join(f"{name} {value:+.2f}" for name, value in e.prior_contributions)]
            for e in events if e.prior_contributions]


TRIAL_HEADER = ["candidate", "verdict", "trial Δval pp", "paired SE pp", "IFEval Δ prompt pp", "IFEval Δ inst pp",
                "IFEval paired SE pp", "full Δadoption pp"]


EXTRAPOLATED_HEADER = ["IFEval prompt at full length pp [95 %]", "IFEval inst at full length pp [95 %]",
                       "extrapolation group", "within guard at full length"]
"""The columns a run with an extrapolation model adds: the trial's IFEval changes extrapolated to full
length (Event.trial_retention_extrapolated) beside its raw readings."""


def _extrapolated(x: Any, metric: str) -> str:
    lo, hi = x.interval_pp[metric]
    return f"{x.predicted_pp[metric]:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def _extrapolation_note(rd: RunDir, manifest: Any) -> str:
    """What the extrapolated columns are, where the run froze an extrapolation model."""
    x = manifest.extrapolation
    if x is None:
        return ""
    warn = f" Warning: {x.footing_warning}." if x.footing_warning else ""
    return (f" The trial's retention check held each IFEval change extrapolated to full length by the frozen model "
            f"({rd.extrapolation_file.name}, sha256 {x.sha256[:12]}) to the guard, -{manifest.gate.ifeval_max_drop_pp:g} "
            "pp: below it the verdict acted on was Fail, whatever the trial's own verdict (shown here)." + warn)


def trial_header(events: list[Event]) -> list[str]:
    """TRIAL_HEADER, and the extrapolated columns where a trial carries its extrapolated retention."""
    return TRIAL_HEADER + (EXTRAPOLATED_HEADER if any(e.trial_retention_extrapolated for e in events) else [])


def trial_rows(rd: RunDir, gate: Any, events: list[Event]) -> list[list[Any]]:
    """Every trial that ran: its verdict (a single run's) and deltas with their paired SE (the trial
    record's, policies.gate.trial_paired_se), beside the full run's adoption delta where one ran, and,
    in a run with an extrapolation model, the IFEval changes extrapolated to full length."""
    rows, extrapolated = [], len(trial_header(events)) > len(TRIAL_HEADER)
    for e in events:
        t = rd.trial(e.decision.decision_hash)
        if t is None:
            continue
        ret = lambda m: t.retention_deltas.get(f"{gate.ifeval_suite}.{m}")  # noqa: E731
        rows.append([e.candidate_id, t.verdict, t.delta_val, t.paired_se_pp.get("target"),
                     ret(gate.ifeval_prompt_metric), ret(gate.ifeval_instruction_metric),
                     t.paired_se_pp.get(gate.ifeval_suite), e.fidelity["full_delta_adoption"] if e.fidelity else None])
        if extrapolated:
            x = e.trial_retention_extrapolated
            rows[-1] += ([_extrapolated(x, "ifeval.prompt_strict"), _extrapolated(x, "ifeval.inst_strict"),
                          x.group + (" (fallback)" if x.fallback else ""), "yes" if x.safe else "no"]
                         if x else [None] * len(EXTRAPOLATED_HEADER))
    return rows


def burn_down(events: list[Event], budget_h: float, spent_h: float) -> list[list[Any]]:
    left, rows = budget_h, [["start", "", 0.0, budget_h]]
    for e in events:
        left -= e.cost_device_hours
        rows.append([e.seq, e.candidate_id, e.cost_device_hours, round(left, 4)])
    rows.append(["ledger total (incl. shared evaluations)", "", round(spent_h, 4), round(budget_h - spent_h, 4)])
    return rows


def trajectory(rd: RunDir, manifest: Manifest, events: list[Event]) -> tuple[list[str], list[list[Any]]]:
    """Adoption metrics of the initial parent and of every promoted child, in order."""
    shas = [("initial", manifest.initial.sha256)]
    shas += [(e.candidate_id, _child_sha(rd, e)) for e in events if e.outcome == "promoted"]
    cols: list[str] = []
    rows = []
    for label, sha in shas:
        res = _results(rd, sha, "adoption") or {}
        flat = {f"{s}.{k}": v for s, r in res.items() for k, v in r.metrics.items()}
        cols += [c for c in flat if c not in cols]
        rows.append((label, flat))
    return ["model"] + cols, [[label] + [flat.get(c) for c in cols] for label, flat in rows]


def endpoint_rows(rd: RunDir, final_sha: str) -> list[list[Any]]:
    """Every metric of the final parent on the held-out test split (agent.loop.nodes.endpoint), with
    its adoption value beside it (the split the gate selected on)."""
    test = _results(rd, final_sha, ENDPOINT_SPLIT) or {}
    adoption = _results(rd, final_sha, "adoption") or {}
    return [[suite, metric, value, adoption[suite].metrics.get(metric) if suite in adoption else None, len(r.items)]
            for suite, r in sorted(test.items()) for metric, value in sorted(r.metrics.items())]


def ifeval_points(events: list[Event]) -> list[dict[str, Any]]:
    """Each child the gate judged: its IFEval strict accuracies and its outcome."""
    points = []
    for e in events:
        vals = {k.split(".", 1)[1]: v for k, v in e.metrics.items() if k.startswith("ifeval.")}
        if vals:
            points.append({"seq": e.seq, "candidate": e.candidate_id, "outcome": e.outcome} | vals)
    return points


def _heatmap(rd: RunDir, drift: dict[str, dict[str, float | None]]) -> list[Table | Figure | str]:
    """Groups and sub-capabilities x every child that reached the gate (drift % vs the initial parent)."""
    if not drift:
        return ["(no child reached the gate: no heat map)"]
    data = write_heatmap(drift, rd.heatmap_png, rd.heatmap_json,
                         title=f"CapTrack drift vs the initial parent, episode {rd.episode_id}")
    caption = ("Relative drift (%) of each CapTrack group and sub-capability of a child against the initial "
               "parent (blue better, red worse; grey n/a: unknown, or a base below the floor). Matrix: "
               f"{rd.heatmap_json.name}.")
    rows = [[row, meaning, ", ".join(metrics) or "–"] for row, meaning, metrics in legend(data["rows"])]
    return [Figure("heatmap", rd.heatmap_png.read_bytes(), caption),
            Table(["row", "what it measures", "metrics behind it"], rows, id="heatmap-legend")]


NOISE_HEADER = ["seq", "candidate", "check", "passed", "items", "paired Δ pp", "paired SE pp", "McNemar p", "regime"]


def _noise_parts(check: GateCheck) -> list[tuple[str, str]]:
    # (label, numbers prefix): the IFEval guard and the target carry one paired comparison; the
    # CapTrack check one per group, and per sub-capability where a severe regime was at stake.
    if check.name in ("ifeval_guard", "target"):
        return [(check.name, "")]
    if check.name != "captrack":
        return []
    caps = [k.removesuffix(".n_items") for k in check.numbers if k.endswith(".n_items")]
    return [(f"captrack {c}", f"{c}.") for c in caps
            if "/" not in c or check.numbers.get(f"{c}.raw_severity") in ("severe", "catastrophic")]


def _regime(nums: dict, prefix: str) -> str | None:
    judged, raw = nums.get(f"{prefix}severity"), nums.get(f"{prefix}raw_severity")
    # a verdict stored before the gate recorded why had one reason only: too few items
    why = nums.get(f"{prefix}capped_by") or "too few items"
    return f"{judged} (capped from {raw}: {why})" if judged != raw else judged


def noise_rows(judged: list[tuple[int, str, GateVerdict]]) -> list[list[Any]]:
    """Each (seq, candidate, verdict): every gate check beside its paired noise (policies/gate.py's numbers)."""
    rows = []
    for seq, candidate, verdict in judged:
        for check in verdict.checks:
            for label, pre in _noise_parts(check):
                n = check.numbers
                items = n.get(f"{pre}n_items")  # a count, stored as a float among the check's numbers
                rows.append([seq, candidate, label, "pass" if check.passed else "FAIL",
                             None if items is None else int(items),
                             n.get(f"{pre}paired_delta_pp"), n.get(f"{pre}paired_se_pp"), n.get(f"{pre}mcnemar_p"),
                             _regime(n, pre) if pre else None])
    return rows


def _judged(rd: RunDir, events: list[Event]) -> list[tuple[int, str, GateVerdict]]:
    verdicts = [(e.seq, e.candidate_id, rd.verdict(e.decision.decision_hash)) for e in events]
    return [(seq, cid, v) for seq, cid, v in verdicts if v is not None]


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k}×{n}" for k, n in d.items())


def compatibility_rows(stored: tuple[Compatibility, ...]) -> list[list[Any]]:
    """The library against the initial parent and every promoted child (the report node compiled
    it: agent.loop.reporting.compatibility): counts of A, of the parent and data field scores,
    and of H with the conflicts that fired."""
    return [[c.stage, c.parent_sha256[:12], c.n, _counts(c.A), _counts(c.fields["parent"]), _counts(c.fields["data"]),
             c.H, "; ".join(f"{k} ×{n}" for k, n in c.conflicts.items()) or "–"] for c in stored]


def _gonogo_sections(rd: RunDir, manifest: Manifest, events: list[Event], inputs: ReportInputs) -> list[Section]:
    """bcit_predictive's sections: why each trial went on or stopped, the trials skipped, the refit."""
    out = []
    if why := gonogo_rows(events):
        out.append(Section("Go/no-go: why each trial went on or stopped (bcit_predictive)", [
            f"The frozen model ({rd.gonogo_file.name}, sha256 {manifest.gonogo.sha256[:12] if manifest.gonogo else '?'}) "
            "read each trial's curve, card and record; a contribution is coefficient x standardised value in "
            "P(harmful)'s log-odds (positive: toward no-go), the largest first."
            + (f" Warning: {manifest.gonogo.footing_warning}." if manifest.gonogo and manifest.gonogo.footing_warning
               else ""),
            Table(["seq", "candidate", "trial verdict", "acted on", "contributions"], why, id="gonogo")]))
    if skipped := skip_rows(events):
        out.append(Section("Go/no-go: trials skipped on the evidence (bcit_predictive)", [
            "The frozen model's prior-only head read each candidate's card and record before any trial; where "
            "its P(harmful) was at or under its own Learn-then-Test threshold (and, where the model has the "
            "floor, its P(beneficial) at least the floor) the candidate trained without a "
            "trial (rule bcit_predictive.prior_skip). Contributions as above, of the prior-only head.",
            Table(["seq", "candidate", "prior P(harmful)", "threshold", "prior P(beneficial)", "outcome",
                   "contributions"], skipped,
                  id="gonogo-skip")]))
    if inputs.gonogo_refit is not None:
        out.append(_refit_section(inputs.gonogo_refit))
    return out


def sections(rd: RunDir, inputs: ReportInputs) -> list[Section]:
    """Every section of the report, computed once for both renderings."""
    manifest, events = rd.manifest(), list(inputs.events)
    ledger = rd.read_ledger()
    spent, budget = ledger.spent(rd.episode_id), manifest.budget_device_hours
    version = "–" if inputs.library_version is None else inputs.library_version
    summary = (f"Manifest {inputs.manifest_hash[:16]}; stopped: {inputs.stop_reason}; "
               f"promotions: {inputs.stage}; new library version: {version}; "
               f"spent {spent:.3f} of {budget:.3f} device-hours.")
    out = [Section("Summary", [summary]),
           Section("Decisions (features, action, rule)", [Table(
               ["seq", "candidate", "grade", "S", "A", "H", "Q", "nu", "chi", "action", "rule", "outcome", "cost h",
                "reason"], decision_rows(events), id="decisions")])]
    out.append(Section("Compatibility of the library with each parent", [
        "Every library record compiled against the initial parent and each promoted child (counts of each value).",
        Table(["stage", "parent", "records", "A", "parent field", "data field", "H", "hard conflicts"],
              compatibility_rows(inputs.compatibility), id="compatibility")]))
    if approvals := report_rows(rd.path):
        out.append(Section("Approvals (approvals.jsonl, hash-chained)", [Table(
            ["#", "before", "candidate", "decision", "device h", "answer", "by", "reason"], approvals, id="approvals")]))
    answered = json.loads(rd.proposals_file.read_text()) if rd.proposals_file.exists() else []
    if answered:
        out.append(Section("LLM proposals", [Table(["#", "status", "reason"], [
            [p["index"], p["status"], p["reason"]] for p in answered])]))
    out.append(Section("Ledger and budget burn-down", [
        Figure("burn-down", burn_down_chart(events, budget, spent), "Device-hours left after each decision; the red "
               "dot is the ledger's total, which also counts evaluations shared between decisions."),
        Table(["seq", "candidate", "charged h", "left h"], burn_down(events, budget, spent))]))
    trials = trial_rows(rd, manifest.gate, events)
    out.append(Section("Trial fidelity (every trial, and the full run where one ran)", [
        "Each verdict is one run's; its paired SE (by item id, as beside the gate's checks) says how far one "
        "run's delta can be trusted: the target against the current parent, IFEval against the initial parent."
        + _extrapolation_note(rd, manifest),
        Table(trial_header(events), trials, id="trials") if trials else "(no trial ran)"]))
    out += _gonogo_sections(rd, manifest, events, inputs)
    ends = endpoint_rows(rd, inputs.final_parent_sha256)
    out.append(Section("Endpoint: the final parent on the held-out test split", [
        "Scored once, after the last decision; no rule read it. Adoption (beside it) is what the gate selected on.",
        Table(["suite", "metric", "test", "adoption", "test items"], ends, id="endpoint") if ends
        else "(no test-split evaluation: an episode from before the endpoint existed)"]))
    header, rows = trajectory(rd, manifest, events)
    out.append(Section("Trajectory of every suite across promotions (adoption split)", [
        Figure("trajectories", trajectory_chart(header, rows), "Primary metric of each suite (and IFEval prompt "
               "strict) for the initial parent and every promoted child; the table lists every metric."),
        Table(header, rows)]))
    out.append(Section("CapTrack heat map", _heatmap(rd, inputs.captrack_drift)))
    out.append(_ifeval_section(rd, manifest, events))
    noise = noise_rows(_judged(rd, events))
    out.append(Section("Gate checks beside the noise (paired, by item id)", [
        "Paired Δ: mean per-item change in correctness (pp) against the initial parent (the target: against "
        "the current parent), with its standard error and the exact McNemar p on the items that changed. A "
        f"CapTrack regime worse than moderate needs {manifest.gate.min_severe_items} items"
        + (f" that show a significant loss (McNemar p < {manifest.gate.alpha}, more lost than gained)."
           if manifest.gate.severe_needs_significant_loss else "."),
        Table(NOISE_HEADER, noise, id="gate-noise") if noise else "(no child reached the gate)"]))
    out.append(time_section(ledger.charges(rd.episode_id), inputs.wall_seconds))
    return out


def _threshold(t: float | None) -> str:
    return "none chosen (authorizes nothing)" if t is None else f"{t:g}"


def _refit_section(refit: RefitSummary) -> Section:
    """What consolidation did with the run's go/no-go model: its refit on the episode's paired runs."""
    if not refit.refit:
        return Section("Go/no-go refit at consolidation", [f"Not refit: {refit.reason}."])
    return Section("Go/no-go refit at consolidation", [
        f"Library version {refit.library_version} stores the model refit on its rows plus the episode's paired runs "
        f"(sha256 {(refit.sha256 or '')[:12]}; a later run reads it with --gonogo-model library): {refit.reason}.",
        Table(["", "before (the run's frozen model)", "after (the refit)"], [
            ["paired runs (n_train)", refit.n_train_before, refit.n_train_after],
            ["threshold on P(harmful)", _threshold(refit.threshold_before), _threshold(refit.threshold_after)],
            ["training hash", refit.training_hash_before[:16], (refit.training_hash_after or "")[:16]]],
              id="gonogo-refit")])


def _ifeval_section(rd: RunDir, manifest: Manifest, events: list[Event]) -> Section:
    """Each judged child's IFEval strict accuracies against the initial parent and the guard."""
    initial = _results(rd, manifest.initial.sha256, "adoption") or {}
    base = dict(initial["ifeval"].metrics) if "ifeval" in initial else {}
    points, drop = ifeval_points(events), manifest.gate.ifeval_max_drop_pp
    guard_rows = [[p["seq"], p["candidate"], ", ".join(f"{k}={v:.1f}" for k, v in sorted(p.items())
                                                         if isinstance(v, float)), p["outcome"]] for p in points]
    return Section("IFEval guard over time", [
        Figure("ifeval-guard", ifeval_chart(points, base, drop), f"IFEval strict accuracies of each child the gate "
               f"judged; a child more than {drop:g} pp below the initial parent fails the non-compensable guard."),
        Table(["seq", "candidate", "values", "outcome"], guard_rows or [["–", "no child was evaluated", "", ""]])])


TIME_SECTION = "Where the wall-clock went"
"""The one section that measures this process rather than the decisions: the only part of the
report that differs between an episode run with and without the run cache."""


def time_section(charges: list[dict], wall: float) -> Section:
    """Trials, full runs, evaluations and the control plane, up to the report (agent.views.timing);
    charges the run cache served are counted apart, at the seconds they cost when they ran."""
    if wall <= 0:
        return Section(TIME_SECTION, ["(no checkpoints: the episode did not run under the loop)"])
    try:
        split = time_breakdown(charges, wall)
    except BadInput as exc:  # a resumed episode's walls can exceed this process's span
        return Section(TIME_SECTION, [f"(not computed: {exc})"])
    rows = [[name, part["n"], part["seconds"], 100 * part["share"]] for name, part in split["parts"].items()]
    cache = split["cache"]
    return Section(TIME_SECTION, [
        f"{wall:.1f} s from the first checkpoint to the report (a resumed episode's span includes the time it "
        f"was down). Control plane under 1%: {split['control_plane_within_goal']}. Run cache: {cache['hits']} of "
        f"{cache['of']} charges served from it, {cache['saved_s']:.1f} s not spent again.",
        Table(["part", "charges", "seconds", "share %"], rows, id="time")])


def write_report(rd: RunDir) -> Path:
    """Write report.md (with its PNGs) and the self-contained report.html from the run directory
    alone (report_inputs.json included); return the .md path."""
    parts = sections(rd, rd.report_inputs())
    for s in parts:
        for b in s.blocks:
            if isinstance(b, Figure) and b.id != "heatmap":  # the heat map wrote its own file
                rd.figure_file(b.id).write_bytes(b.png)
    rd.report_md.write_text(markdown(parts, rd.episode_id, lambda fig: _md_file(rd, fig)), encoding="utf-8")
    rd.report_html.write_text(page(parts, rd.episode_id), encoding="utf-8")
    return rd.report_md


def _md_file(rd: RunDir, fig: Figure) -> str:
    return (rd.heatmap_png if fig.id == "heatmap" else rd.figure_file(fig.id)).name
