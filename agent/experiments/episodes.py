"""What one finished episode recorded, read from its run directory and its own bank: the
EpisodeResult `agent compare` aggregates (agent/experiments/compare.py) and writes
(agent/experiments/compare_output.py).

Two steps: `digest(run_dir)` reads the run directory into small JSON (what the statistics need,
nothing else), and `episode_result(digest)` is a pure function of it. An episode run now and one
taken from a results directory (agent/experiments/compare_results.py) go through the same
`episode_result`.

"Endpoint" is the final parent's scores on the held-out test split (ENDPOINT_SPLIT), which `agent
run` evaluates once at the end of every episode; the adoption-split figure, which the gate
selected on and so is optimistic, is kept beside it (`endpoint_adoption`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypedDict

from experience_bank.families import family_targets
from experience_bank.decisions import Event

from agent.run.manifest import ENDPOINT_SPLIT, Manifest
from agent.run.rundir import RunDir
from experience_bank.bank import Bank
from trainers.ledger import Ledger

IFEVAL_METRICS = ("ifeval.prompt_strict", "ifeval.inst_strict")
"""The retention metrics compare reports beside each endpoint."""
PAIRING_KEYS = ("library_version", "candidates_sha256", "budget_device_hours", "initial.sha256")
"""Manifest values that must agree across the policies of one seed."""


def adoption_metrics(run: RunDir, sha: str, split: str = "adoption") -> dict[str, float]:
    """Flat `suite.metric` values of one model's evaluation on a split ({} when not recorded)."""
    if not run.has_evaluation(sha, split):
        return {}
    return {f"{s}.{k}": v for s, r in run.evaluation(sha, split).items() for k, v in r.metrics.items()
            if v is not None}


def _events(manifest: Manifest) -> list[Event]:
    """The episode's executed events, from its own bank's hash-chained history (the run
    directory's outcomes.jsonl holds audit outcome cells, not events)."""
    with Bank.open(manifest.config.bank) as bank:
        return bank.events(manifest.episode_id)


def _manifest_value(manifest, dotted: str) -> Any:
    value: Any = manifest.model_dump(mode="json")
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _targets(metrics: dict[str, float]) -> dict[str, float]:
    return {fam: metrics[key] for fam, key in family_targets().items() if key in metrics}


def _authorized(event: dict[str, Any]) -> bool:
    """A full run was authorized: it ran, or the decision allowed it and only the budget refused it."""
    return event["full_run"] in ("ran", "refused")


class EpisodeResult(TypedDict, total=False):
    """What compare reads of one episode (JSON in compare.json; `policy`, `seed` and `status` are
    added by the job that ran it). Scores are pp on the target capability of each family."""

    run_dir: str
    """Its run directory on this machine (absent when taken from a results directory)."""
    taken_from: str
    """The results directory's file it was taken from (absent when its run directory was read here)."""
    budget_h: float
    families: list[str]
    initial_sha256: str
    pairing: dict[str, Any]
    """PAIRING_KEYS -> the manifest's value."""
    endpoint: dict[str, float]
    """The final parent on the test split (ENDPOINT_SPLIT), by family."""
    endpoint_adoption: dict[str, float]
    """The final parent on the adoption split (what the gate selected on: optimistic)."""
    initial: dict[str, float]
    ifeval: dict[str, float | None]
    ifeval_adoption: dict[str, float | None]
    ifeval_initial: dict[str, float | None]
    promotions: int
    promoted: list[str]
    """The cards whose children were promoted, in order (none named in digests stored before cards were)."""
    authorizations: int
    decisions: int
    wasted_h: float
    """Device-hours of decisions that promoted nothing."""
    unpromoted: list[dict[str, Any]]
    """Those decisions, one row each (`unpromoted`): where the policy spent without promoting."""
    spent_h: float
    trajectory: list[list[Any]]
    """[device-hours spent, the parent's adoption scores by family] after each decision."""
    cache: dict[str, Any]
    policy: str
    seed: int
    world_seed: int
    """The embedded world's seed (0 unless `agent compare --world-seeds`)."""
    unit: str
    """The pairing unit when several worlds are pooled: `w<world seed>-s<seed>` (else the seed)."""
    status: str


def unit(ep: EpisodeResult) -> int | str:
    """What pairs episodes across policies: the run seed, or (world seed, run seed) when worlds are pooled."""
    return ep.get("unit", ep["seed"])


def _reason(run: RunDir, event: Event) -> str:
    """The event's frozen reason, with the deciding check's own words where the gate rolled it back
    (the event names only the check: "gate: ifeval_guard")."""
    verdict = run.verdict(event.decision.decision_hash) if event.outcome == "rolled_back" else None
    why = next((c.reason for c in verdict.checks if c.name == verdict.decided_by), None) if verdict else None
    return f"{event.reason}: {why}" if why else event.reason


def digest(run_dir: Path) -> dict[str, Any]:
    """What compare reads of one finished episode, as small JSON (no models, no generations): the
    manifest values it uses, the executed events' fields, the flat scores of the models it reads
    (the initial parent and every promoted child on adoption, the final parent on the test split)
    and the run cache's use. `episode_result` computes everything else from it, so an episode run
    here and one kept in a results directory (agent/experiments/compare_results.py) are read by
    the same code."""
    run = RunDir(run_dir)
    manifest = run.manifest()
    events = sorted(_events(manifest), key=lambda e: e.seq)
    rows = [{"cost_device_hours": e.cost_device_hours, "outcome": e.outcome, "full_run": e.full_run,
             "card": e.candidate_id, "action": e.action, "reason": _reason(run, e), "trial_verdict": e.trial_verdict}
            | ({"child_sha256": run.verdict(e.decision.decision_hash).child_sha256} if e.outcome == "promoted" else {})
            for e in events]
    shas = [manifest.initial.sha256] + [r["child_sha256"] for r in rows if "child_sha256" in r]
    test = adoption_metrics(run, shas[-1], ENDPOINT_SPLIT)
    if not test:
        raise ValueError(f"{run_dir}: the final parent {shas[-1][:12]} has no {ENDPOINT_SPLIT}-split evaluation "
                         "(an episode finished before the endpoint existed): run it again")
    return {"budget_h": manifest.budget_device_hours, "initial_sha256": manifest.initial.sha256,
            "world": manifest.world.recipe_sha256, "pairing": {k: _manifest_value(manifest, k) for k in PAIRING_KEYS},
            "events": rows, "adoption": {sha: adoption_metrics(run, sha) for sha in shas}, "test": {shas[-1]: test},
            "cache": _cache_use(run, manifest.episode_id)}


def read_episode(run_dir: Path, initial_adoption: dict[str, float] | None = None) -> EpisodeResult:
    """The recorded results of one finished episode's run directory (`episode_result` of its digest)."""
    return episode_result(digest(run_dir), initial_adoption) | {"run_dir": str(run_dir)}


def episode_result(d: dict[str, Any], initial_adoption: dict[str, float] | None = None) -> EpisodeResult:
    """The EpisodeResult of one episode's digest (pure).

    An episode that ran no full run never scored its initial parent on adoption (only the gate
    does); `initial_adoption` then supplies those scores, read from a paired episode that did
    (the same weights on the same items: see compare.collect)."""
    parent = d["adoption"][d["initial_sha256"]] or dict(initial_adoption or {})
    initial, final_sha = dict(parent), d["initial_sha256"]
    hours, trajectory = 0.0, [[0.0, _targets(parent)]]
    for e in d["events"]:
        hours += e["cost_device_hours"]
        if e["outcome"] == "promoted":
            final_sha = e["child_sha256"]
            parent = d["adoption"][final_sha]
        trajectory.append([round(hours, 9), _targets(parent)])
    test, lost = d["test"][final_sha], unpromoted(d["events"])
    return {
        "budget_h": d["budget_h"], "families": sorted(_targets(test)), "initial_sha256": d["initial_sha256"],
        "pairing": dict(d["pairing"]), "endpoint": _targets(test), "endpoint_adoption": _targets(parent),
        "initial": _targets(initial), "ifeval": {k: test.get(k) for k in IFEVAL_METRICS},
        "ifeval_adoption": {k: parent.get(k) for k in IFEVAL_METRICS},
        "ifeval_initial": {k: initial.get(k) for k in IFEVAL_METRICS},
        "promotions": sum(e["outcome"] == "promoted" for e in d["events"]),
        "promoted": [e["card"] for e in d["events"] if e["outcome"] == "promoted" and e.get("card")],
        "authorizations": sum(_authorized(e) for e in d["events"]),
        "decisions": len(d["events"]),
        "wasted_h": round(sum(r["hours"] for r in lost), 9),
        "spent_h": round(hours, 9), "trajectory": trajectory, "cache": dict(d["cache"]),
        "unpromoted": lost,
    }


def unpromoted(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decisions that spent device-hours and promoted nothing: card, route, outcome, hours and
    the frozen reason (the deciding gate check or trial rule). Digests stored before cards were
    recorded name none: their rows carry the outcome and hours only."""
    keys = ("card", "action", "outcome", "trial_verdict", "reason")
    return [{k: e.get(k) for k in keys} | {"hours": e["cost_device_hours"]}
            for e in events if e["outcome"] != "promoted" and e["cost_device_hours"] > 0]


def _cache_use(run: RunDir, episode_id: str) -> dict[str, Any]:
    """Charges the run cache served (of all the episode's charges) and the wall-clock they had
    cost when they ran: the seconds this episode did not spend."""
    rows = Ledger(str(run.ledger_file)).charges(episode_id) if run.ledger_file.is_file() else []
    served = [r for r in rows if r.get("cached")]
    return {"hits": len(served), "charges": len(rows), "saved_s": round(sum(r["wall_seconds"] for r in served), 3)}


def endpoint_mean(ep: EpisodeResult, field: str = "endpoint") -> float | None:
    """Mean over the target capabilities of the final parent on the test split (`field`
    "endpoint_adoption": on the adoption split); None if any is missing."""
    vals = [ep[field].get(f) for f in ep["families"]]
    return None if not vals or None in vals else sum(vals) / len(vals)


def cause(row: dict[str, Any]) -> str:
    """What stopped one unpromoted decision, from its frozen reason: the deciding gate check
    ("gate: ifeval_guard") or trial rule ("trial fail: retention"); the bare outcome where the
    digest names no reason (stored before reasons were kept)."""
    reason = row.get("reason")
    if not reason:
        return row["outcome"]
    head, _, rule = reason.partition(":")
    rule = re.split(r"[:(;]|[-+]?[0-9]", rule, maxsplit=1)[0].strip()  # the rule's name, not its numbers or their sign
    return f"{head.strip()}: {rule}" if rule else head.strip()


def where_unpromoted(eps: list[EpisodeResult]) -> dict[str, dict[str, Any]]:
    """Per cause (`cause`), over these episodes: the decisions that spent without promoting, their
    device-hours and the cards (most frequent cause first)."""
    out: dict[str, dict[str, Any]] = {}
    for e in eps:
        for r in e.get("unpromoted", []):
            c = out.setdefault(cause(r), {"n": 0, "hours": 0.0, "cards": {}})
            c["n"] += 1
            c["hours"] = round(c["hours"] + r["hours"], 9)
            if r.get("card"):
                c["cards"][r["card"]] = c["cards"].get(r["card"], 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1]["hours"], kv[0])))
