"""The composition of one episode: validate the inputs, freeze the manifest, run or resume the graph.

Order matters: every input is checked (config, budget, world/model, bank schema, proposer
settings) before the run directory is created, so bad input writes nothing. The manifest is
frozen and hashed before the first node. The graph runs under LangGraph's SQLite
checkpointer (`runs/ID/checkpoints.sqlite`) with durability="sync" and a JSON-only
serializer (no pickle fallback, no msgpack object revival; reliability §A4), so
`agent run --resume ID` continues at the node that was running when the process died.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from agent.config import RunConfig
from agent.graph import build_graph
from agent.state import Ctx, Entry
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json

IDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")

RECURSION_LIMIT = 100_000
"""Supersteps: about five per candidate, so any catalogue fits."""


def strict_serde() -> JsonPlusSerializer:
    """A serializer that never unpickles and revives no Python objects (the state is plain JSON)."""
    return JsonPlusSerializer(pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=None)


def drive(ctx: Ctx, initial: dict[str, Any], checkpoints: Path) -> dict[str, Any]:
    """Run the graph to its end, or resume it from its last checkpoint; return the final state."""
    conn = sqlite3.connect(str(checkpoints), check_same_thread=False)
    try:
        graph = build_graph(SqliteSaver(conn, serde=strict_serde()))
        config = {"configurable": {"thread_id": ctx.episode_id}, "recursion_limit": RECURSION_LIMIT}
        snapshot = graph.get_state(config)
        if snapshot.values and not snapshot.next:
            return dict(snapshot.values)  # finished already
        start = None if snapshot.values else initial
        for chunk in graph.stream(start, config, context=ctx, durability="sync", stream_mode="updates"):
            for node, update in chunk.items():
                ctx.progress(node, update or {})
        return dict(graph.get_state(config).values)
    finally:
        conn.close()


# --- the composition ---------------------------------------------------------------------


class LedgerAdapter:
    """trainers.ledger.Ledger behind the nodes' (episode, key, hours, seconds, what) call."""

    def __init__(self, path: Path):
        from trainers.ledger import Ledger

        self.ledger = Ledger(str(path))

    def charge(self, episode_id: str, key: str, device_hours: float, wall_seconds: float, what: str) -> dict:
        kind = key.split(":")[0] if key.startswith("eval:") else key.rsplit(":", 1)[-1]
        return self.ledger.charge(episode_id, key, kind=kind, device_hours=device_hours, wall_seconds=wall_seconds,
                                  detail=what)

    def spent(self, episode_id: str) -> float:
        return self.ledger.spent(episode_id)

    def charges(self, episode_id: str) -> list[dict]:
        return self.ledger.charges(episode_id)


class RunAudit:
    """runs/ID/decisions.jsonl (policies/audit.py's hash-chained ledger, with the frozen inputs)
    and outcomes.jsonl (its OutcomeCells): one line per decision / outcome, written once (a re-run
    of a node finds its line by decision hash and writes nothing)."""

    def __init__(self, run_dir: Path, policy_config, min_gain_pp: float, ifeval_drop_pp: float):
        self.run_dir, self.policy_config = run_dir, policy_config
        self.min_gain_pp, self.ifeval_drop_pp = min_gain_pp, ifeval_drop_pp

    def _has(self, name: str, decision_hash: str) -> bool:
        import json

        path = self.run_dir / name
        if not path.exists():
            return False
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("decision_hash", row.get("decision", {}).get("decision_hash")) == decision_hash:
                return True
        return False

    def decision(self, decision, record, context, episode: dict[str, int]) -> None:
        from policies import EpisodeState
        from policies.audit import write_ledger_entry

        if self._has("decisions.jsonl", decision.decision_hash):
            return
        state = EpisodeState(new_proposals_used=episode["proposals_authorized"], leases_used=episode["leases_used"])
        write_ledger_entry(self.run_dir / "decisions.jsonl", episode_id=self.run_dir.name, decision=decision,
                           config=self.policy_config, state=state, record=record, context=context)

    def outcome(self, event, trial_verdict: str | None) -> None:
        from policies.audit import OutcomeCell, write_outcome

        if event.outcome in ("rejected", "not_started") or self._has("outcomes.jsonl", event.decision.decision_hash):
            return  # nothing was observed: the cell stays undetermined, never guessed
        gain = next((v for k, v in event.metrics.items() if k.startswith("gain.")), None)
        if gain is not None:
            cls = "beneficial" if event.outcome == "promoted" else ("harmful" if gain <= -self.min_gain_pp else "neutral")
        else:
            cls = "harmful" if event.metrics.get("trial.delta_val", 0.0) <= -self.min_gain_pp else "neutral"
        write_outcome(self.run_dir / "outcomes.jsonl", OutcomeCell(
            candidate_id=event.candidate_id, decision_hash=event.decision.decision_hash, outcome=cls,
            trial_verdict=trial_verdict if trial_verdict in ("pass", "fail", "inconclusive") else None,
            trial_delta=event.metrics.get("trial.delta_val"), full={"target": gain} if gain is not None else {},
            full_device_hours=event.cost_device_hours))


def _run_dir(cfg: RunConfig, resume: str | None) -> Path:
    if resume:
        path = Path(resume)
        path = path if path.is_dir() or "/" in resume else Path("runs") / resume
        if not (path / "manifest.json").is_file():
            raise BadInput(f"no run to resume at {path}: pass a run id under runs/ or a run directory")
        return path
    out = Path(cfg.out) if cfg.out else Path("runs") / time.strftime("ep-%Y%m%d-%H%M%S")
    if (out / "manifest.json").exists():
        raise BadInput(f"{out} already holds a run: resume it with --resume {out} or choose another --out")
    if not IDENT.match(out.name):
        raise BadInput(f"run directory name {out.name!r} is not a valid episode id: use letters, digits, . _ - only")
    return out


def check_inputs(cfg: RunConfig) -> float:
    """Every check that needs no writing; BadInput names the problem and the fix."""
    from trainers.ledger import parse_budget

    from agent.inputs import check_bank_file
    from policies import POLICIES

    budget_h = parse_budget(cfg.episode_budget)
    if cfg.policy not in POLICIES:
        raise BadInput(f"unknown policy {cfg.policy!r}: choose one of {', '.join(POLICIES)}")
    if cfg.proposer == "openai" and not (cfg.base_url and cfg.model):
        raise BadInput("--proposer openai needs --base-url URL and --model NAME")
    if cfg.base_model is not None:
        if not (Path(cfg.base_model) / "config.json").is_file():
            raise BadInput(f"base model {cfg.base_model} not found (no config.json): give a local HF model directory")
        raise BadInput("the real profile (base_model) is configured but its world adapter is not in this build: "
                       "run the embedded world (omit base_model)")
    if cfg.deepspeed_config is not None and not Path(cfg.deepspeed_config).is_file():
        raise BadInput(f"DeepSpeed config {cfg.deepspeed_config} not found: fix deepspeed_config")
    bank = Path(cfg.bank)
    check_bank_file(bank)  # before Bank.open, which would migrate a stray file into a bank
    if bank.exists():
        from experience_bank.bank import Bank

        Bank.open(bank).close()  # refuses a bank from a newer schema
    return budget_h


def run_episode(cfg: RunConfig, resume: str | None = None, say=print) -> dict[str, Any]:
    """Run (or resume) one episode; return its final state."""
    from agent import manifest as mf

    if resume:
        run_dir = _run_dir(cfg, resume)
        manifest = mf.load(run_dir)
        cfg = RunConfig(**manifest["config"]) if not cfg.quiet else RunConfig(**(manifest["config"] | {"quiet": True}))
    else:
        budget_h = check_inputs(cfg)
        run_dir = _run_dir(cfg, None)
    world, bank = _world_and_bank(cfg, say)
    try:
        if not resume:
            manifest = _freeze_new(cfg, budget_h, run_dir, world, bank)
        ctx = _context(cfg, run_dir, manifest, world, bank, say)
        bank.start_episode(ctx.episode_id, manifest["manifest_hash"], manifest["library_version"])
        initial = {"episode_id": ctx.episode_id, "manifest_hash": manifest["manifest_hash"], "cursor": 0, "seq": 0,
                   "stage": 0, "parent_dir": manifest["initial"]["dir"], "parent_sha": manifest["initial"]["sha256"],
                   "spent_h": 0.0, "consecutive_rejections": 0, "proposals_authorized": 0, "leases_used": 0,
                   "stop_reason": ""}
        from agent.tracking import tracked  # the MLflow view (a tracker that is down warns once)

        with _display(cfg, ctx, say), tracked(ctx, enabled=cfg.tracking, uri=cfg.tracking_uri):
            return drive(ctx, initial, run_dir / "checkpoints.sqlite")
    finally:
        bank.close()


def _world_and_bank(cfg: RunConfig, say):
    from agent.world.embedded import ensure_world
    from experience_bank.bank import Bank

    from agent.progress import reporter

    with reporter(f"world {cfg.world}", cfg.quiet, say) as progress:
        world = ensure_world(cfg.world, progress=progress)
    if not Path(cfg.bank).exists():
        from agent.world.seed_bank import build_seed_bank

        say(f"building the seed bank of world {cfg.world} at {cfg.bank} (once)")
        with reporter("seed bank", cfg.quiet, say) as progress:
            build_seed_bank(world, cfg.bank, progress)
    return world, Bank.open(cfg.bank)


def _allowlist(world, bank):
    from agent.proposer import Allowlist

    return Allowlist(datasets=dict(world.datasets), taken_ids=frozenset(e.record.card.id for e in bank.library_records()))


def _freeze_new(cfg: RunConfig, budget_h: float, run_dir: Path, world, bank) -> dict[str, Any]:
    from agent import manifest as mf
    from agent.promotion import init_parent

    version = bank.current_library_version()
    hashes = [e.hash for e in bank.library_records(version)]
    evaluators = {"suites": list(WORLD_SUITES()), "eval_protocol": world.eval_protocol, "backend": cfg.backend,
                  "n": cfg.eval_n, "batch_size": cfg.eval_batch_size, "seed": cfg.seed}
    manifest = mf.build_manifest(
        episode_id=run_dir.name, config=cfg.model_dump(mode="json"), budget_h=budget_h, base_dir=world.base_dir,
        base_sha=world.model.sha256, world={"size": world.size, "recipe_sha256": world.recipe_sha256,
                                            "chat_template_sha256": world.chat_template_sha256},
        library_version=version, candidate_hashes=hashes, evaluators=evaluators, datasets=dict(world.datasets),
        allowlist=_allowlist(world, bank).manifest())
    run_dir.mkdir(parents=True, exist_ok=True)
    mf.freeze(run_dir, manifest)
    init_parent(run_dir, world.base_dir, world.model.sha256)
    return manifest


def WORLD_SUITES():  # noqa: N802 - a constant, imported lazily with the world module
    from agent.world.store import SUITES

    return SUITES


def _context(cfg: RunConfig, run_dir: Path, manifest: dict, world, bank, say) -> Ctx:
    from agent.nodes_ports import WorldPorts
    from agent.proposer import load_proposals

    entries = {e.hash: Entry(e.hash, e.record, e.conflicted) for e in bank.library_records(manifest["library_version"])}
    entries |= {e.hash: e for e in load_proposals(run_dir)}
    ports = WorldPorts(world, cfg, _allowlist(world, bank))
    return Ctx(run_dir=run_dir, episode_id=run_dir.name, manifest=manifest, entries=entries, ports=ports, bank=bank,
               ledger=LedgerAdapter(run_dir / "ledger.sqlite"),
               audit=RunAudit(run_dir, ports.policy_config, cfg.gate_min_gain_pp, cfg.gate_ifeval_drop_pp))


@contextmanager
def _display(cfg: RunConfig, ctx: Ctx, say):
    """Live progress (budget left, node, candidate, last verdict); --quiet, or stdout that is
    not a terminal, gets log lines."""
    from agent.progress import live_display

    budget = ctx.manifest["budget_device_hours"]
    seen: dict[str, Any] = {"node": "", "candidate": "", "verdict": "", "spent": 0.0}

    def line() -> str:
        return (f"[{ctx.episode_id}] node {seen['node']:<11} candidate {seen['candidate'] or '-':<8} "
                f"last {seen['verdict'] or '-':<30} budget left {budget - seen['spent']:.3f}/{budget:g} h")

    def update(node: str, upd: dict[str, Any]) -> None:
        seen["node"] = node
        seen["candidate"] = upd.get("candidate_id", seen["candidate"])
        seen["spent"] = upd.get("spent_h", seen["spent"])
        for key in ("verdict", "trial_verdict", "action", "stop_reason"):
            if upd.get(key):
                seen["verdict"] = f"{key}={upd[key]}"
        if live is None:
            say(line())
        else:
            live.update(Text(line()))

    live = None
    if not live_display(cfg.quiet):
        ctx.progress = update
        yield
        return
    from rich.live import Live
    from rich.text import Text

    with Live(Text(line()), refresh_per_second=4, transient=False) as live:
        ctx.progress = update
        yield
