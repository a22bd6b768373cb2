"""What the report needs that only the live episode can compute, gathered by the report node
into runs/ID/report_inputs.json (agent/run/report_inputs.py) before the report is written:
the report (agent/views/report.py) then reads the run directory alone."""

from __future__ import annotations

import time

from experience_bank.decisions import Event
from policies.features import compatibility_summary

from agent.loop.state import Ctx, State
from agent.run.checkpoints import checkpoint_marks
from agent.run.gonogo_model import LIBRARY_KIND
from agent.run.gonogo_refit import Plan, plan, summary
from agent.run.report_inputs import Compatibility, RefitSummary, ReportInputs


def compatibility(ctx: Ctx, events: list[Event]) -> list[Compatibility]:
    """The whole library compiled against the initial parent and against every promoted child:
    counts of A, of the field scores and of H with the conflicts that fired."""
    rd = ctx.rundir
    parents = [(0, ctx.manifest.initial.sha256)]
    for e in events:
        if e.outcome == "promoted":
            parents.append((len(parents), rd.train(e.decision.decision_hash).checkpoint_sha256))
    records = [x for x in ctx.entries.values() if x.record.kind == "historical"]
    rows, prior = [], ()
    for stage, sha in parents:
        current = ctx.ports.context("", sha, stage, prior)
        summary = compatibility_summary([ctx.ports.compile(x, current) for x in records])
        rows.append(Compatibility(stage=stage, parent_sha256=sha, **summary))
        prior = (*prior, sha) if stage else (*ctx.ports.model_ref("", sha).lineage, sha)
    return rows


def captrack_drift(ctx: Ctx, events: list[Event]) -> dict[str, dict[str, float | None]]:
    """Every child that reached the gate: its CapTrack drift (%) against the initial parent."""
    rd = ctx.rundir
    initial_sha = ctx.manifest.initial.sha256
    if not rd.has_evaluation(initial_sha, "adoption"):
        return {}
    initial, table = rd.evaluation(initial_sha, "adoption"), {}
    for e in events:
        verdict = rd.verdict(e.decision.decision_hash)
        if verdict is not None:
            child = verdict.child_sha256
            table[f"{e.seq}:{e.candidate_id}"] = ctx.ports.captrack(
                initial, rd.evaluation(child, "adoption") if rd.has_evaluation(child, "adoption") else None)
    return table


def episode_wall(ctx: Ctx) -> float:
    """Seconds from the episode's first checkpoint to now (a resumed episode's span includes the
    time it was down); 0 when it has no checkpoints."""
    rd = ctx.rundir
    marks = checkpoint_marks(rd.checkpoints_file, ctx.episode_id) if rd.checkpoints_file.is_file() else []
    return max(time.time() - marks[0][1], 0.0) if marks else 0.0


def refit_plan(ctx: Ctx) -> Plan | None:
    """The go/no-go refit of this episode's consolidation (None: the run froze no model)."""
    return plan(ctx.rundir, ctx.manifest, ctx.bank.events(ctx.episode_id),
                {h: e.record.card for h, e in ctx.entries.items()})


def gonogo_refit(ctx: Ctx, version: int | None) -> RefitSummary | None:
    """What consolidation did with the go/no-go (None: the run froze none, or it is not consolidated)."""
    refit = refit_plan(ctx)
    if refit is None or version is None:
        return None
    return summary(refit, ctx.bank.artefact(LIBRARY_KIND, version), version)


def report_inputs(ctx: Ctx, state: State) -> ReportInputs:
    events = ctx.bank.events(ctx.episode_id)
    return ReportInputs(manifest_hash=state.get("manifest_hash") or "", stop_reason=state.get("stop_reason") or "",
                        stage=state.get("stage", 0), library_version=state.get("library_version"),
                        final_parent_sha256=state.get("parent_sha") or ctx.manifest.initial.sha256,
                        events=tuple(events), compatibility=tuple(compatibility(ctx, events)),
                        captrack_drift=captrack_drift(ctx, events), wall_seconds=episode_wall(ctx),
                        gonogo_refit=gonogo_refit(ctx, state.get("library_version")))
