"""The composition of one episode: validate the inputs, freeze the manifest, run or resume the graph.

Order matters: every input is checked (config, budget, world/model, bank schema, proposer
settings) before the run directory is created, so bad input writes nothing. The manifest is
frozen and hashed before the first node. The graph runs under LangGraph's SQLite
checkpointer (`runs/ID/checkpoints.sqlite`) with durability="sync" and a JSON-only
serializer (no pickle fallback, no msgpack object revival: a checkpoint is data, never code), so
`agent run --resume ID` continues at the node that was running when the process died.
"""

from __future__ import annotations

import json
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
from agent.killpoints import kill_point
from agent.manifest import Manifest
from agent.rundir import RunDir
from agent.state import Ctx, Entry
from experience_bank.errors import BadInput


IDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")

RECURSION_LIMIT = 100_000
"""Supersteps: about five per candidate, so any catalogue fits."""


def strict_serde() -> JsonPlusSerializer:
    """A serializer that never unpickles and revives no Python objects (the state is plain JSON)."""
    return JsonPlusSerializer(pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=None)


def drive(ctx: Ctx, initial: dict[str, Any], checkpoints: Path, answer: dict | None = None) -> dict[str, Any]:
    """Run the graph to its end, or resume it from its last checkpoint; return the final state.
    `answer` resumes an episode paused for approval (agent/approval.py) with a person's answer."""
    conn = sqlite3.connect(str(checkpoints), check_same_thread=False)
    try:
        graph = build_graph(SqliteSaver(conn, serde=strict_serde()))
        config = {"configurable": {"thread_id": ctx.episode_id}, "recursion_limit": RECURSION_LIMIT}
        snapshot = graph.get_state(config)
        if snapshot.values and not snapshot.next:
            return dict(snapshot.values)  # finished already
        start = None if snapshot.values else initial
        if answer is not None:
            from langgraph.types import Command

            start = Command(resume=answer)
        for chunk in graph.stream(start, config, context=ctx, durability="sync", stream_mode="updates"):
            for node, update in chunk.items():
                if node == "__interrupt__":  # paused for approval (agent/approval.py): no node ran
                    continue
                ctx.progress(node, update or {})
                kill_point(node)  # a test hook, inert unless AGENT_KILL_AT is set (agent/killpoints.py)
        return dict(graph.get_state(config).values)
    finally:
        conn.close()


# --- the composition ---------------------------------------------------------------------


class RunAudit:
    """runs/ID/decisions.jsonl (policies/audit.py's hash-chained ledger, with the frozen inputs)
    and outcomes.jsonl (its OutcomeCells, the one cell format): one line per decision / outcome,
    written once (a re-run of a node finds its line by decision hash and writes nothing)."""

    def __init__(self, rundir: RunDir, manifest: Manifest):
        self.rundir, self.manifest = rundir, manifest

    def _has(self, path: Path, decision_hash: str) -> bool:
        if not path.exists():
            return False
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("decision_hash", row.get("decision", {}).get("decision_hash")) == decision_hash:
                return True
        return False

    def decision(self, decision, record, context, episode) -> None:
        from policies.audit import write_ledger_entry

        if self._has(self.rundir.decisions_file, decision.decision_hash):
            return
        write_ledger_entry(self.rundir.decisions_file, episode_id=self.rundir.episode_id, decision=decision,
                           config=self.manifest.policy.config, state=episode, record=record, context=context)

    def outcome(self, event, card) -> None:
        from policies.audit import write_outcome

        if event.action == "reject" or self._has(self.rundir.outcomes_file, event.decision.decision_hash):
            return  # a rejection ran nothing: its cell stays undetermined, never guessed
        write_outcome(self.rundir.outcomes_file, outcome_cell(event, card, self.manifest))


def outcome_cell(event, card, manifest: Manifest):
    """The OutcomeCell of one event that ran: trial verdict and delta, full-run effects, and the
    outcome class (policies.outcomes) where a full run was judged by the gate."""
    from policies.audit import OutcomeCell
    from policies.outcomes import outcome_class

    g, family = manifest.gate, card.family
    full, cls = {}, None
    if event.target_gain is not None and set(event.retention) >= {g.ifeval_prompt_metric, g.ifeval_instruction_metric}:
        full = {"target": event.target_gain, "ifeval_p": event.retention[g.ifeval_prompt_metric],
                "ifeval_i": event.retention[g.ifeval_instruction_metric]}
        cls = outcome_class(full["target"], full["ifeval_p"], full["ifeval_i"], band=g.min_gain_pp[family],
                            ifeval_drop_pp=g.ifeval_max_drop_pp, hard_failure=event.gate_decided_by == "hard_failures")
    fraction = f"{manifest.trial.fraction:.2f}"
    short = {fraction: event.trial_delta} if event.trial_delta is not None and fraction in ("0.05", "0.10", "0.20") else {}
    return OutcomeCell(candidate_id=event.candidate_id, decision_hash=event.decision.decision_hash, outcome=cls,
                       family=family, method=card.method, trial_verdict=event.trial_verdict, trial_delta=event.trial_delta,
                       short=short, full=full, trial_device_hours=event.trial_device_hours,
                       full_device_hours=max(event.cost_device_hours - event.trial_device_hours, 0.0))


def _run_dir(cfg: RunConfig, resume: str | None) -> RunDir:
    if resume:
        path = Path(resume)
        path = path if path.is_dir() or "/" in resume else Path("runs") / resume
        if not RunDir(path).started():
            raise BadInput(f"no run to resume at {path}: pass a run id under runs/ or a run directory (a run killed "
                           "before its manifest was written has nothing to resume: run the original command again)")
        return RunDir(path)
    out = Path(cfg.out) if cfg.out else Path("runs") / time.strftime("ep-%Y%m%d-%H%M%S")
    if RunDir(out).started():
        raise BadInput(f"{out} already holds a run: resume it with --resume {out} or choose another --out")
    if not IDENT.match(out.name):
        raise BadInput(f"run directory name {out.name!r} is not a valid episode id: use letters, digits, . _ - only")
    return RunDir(out)


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
        from agent.world.local import local_world

        local_world(cfg)  # model folder, every dataset file and pool: checked, nothing written
    from trainers.launch import check_launch
    from evaluators.generate import check_backend

    check_backend(cfg.backend)
    from agent.approval import kinds

    kinds(cfg.approve)
    if cfg.cards is not None or cfg.cards_only:
        from agent.usercards.folder import read_folder

        if cfg.cards is None:
            raise BadInput("--cards-only needs --cards DIR (the folder of imported recipes)")
        read_folder(cfg.cards)
    check_launch(cfg.launcher, cfg.deepspeed_config)
    bank = Path(cfg.bank)
    check_bank_file(bank)  # before Bank.open, which would migrate a stray file into a bank
    if bank.exists():
        from experience_bank.bank import Bank

        Bank.open(bank).close()  # refuses a bank from a newer schema
    return budget_h


def run_episode(cfg: RunConfig, resume: str | None = None, say=print, answer: dict | None = None) -> dict[str, Any]:
    """Run (or resume) one episode; return its final state (with `run_dir`). `answer`: a
    person's approval of the decision the episode waits on (agent approve)."""
    if resume:
        run_dir = _run_dir(cfg, resume)
        manifest = run_dir.manifest()
        cfg = RunConfig(**(manifest.config | ({"quiet": True} if cfg.quiet else {})))
    else:
        budget_h = check_inputs(cfg)
        run_dir = _run_dir(cfg, None)
    world, bank = _world_and_bank(cfg, say)
    try:
        if not resume:
            manifest = _freeze_new(cfg, budget_h, run_dir, world, bank)
        ctx = _context(cfg, run_dir, manifest, world, bank, say)
        bank.start_episode(ctx.episode_id, manifest.manifest_hash, manifest.library_version)
        initial = {"episode_id": ctx.episode_id, "manifest_hash": manifest.manifest_hash, "cursor": 0, "seq": 0,
                   "stage": 0, "parent_dir": manifest.initial.dir, "parent_sha": manifest.initial.sha256,
                   "lineage": list(world.model.lineage),
                   "spent_h": 0.0, "consecutive_rejections": 0, "proposals_authorized": 0, "leases_used": 0,
                   "stop_reason": ""}
        from agent.tracking import tracked  # the MLflow view (a tracker that is down warns once)

        with _display(cfg, ctx, say), tracked(ctx, enabled=cfg.tracking, uri=cfg.tracking_uri):
            return drive(ctx, initial, run_dir.checkpoints_file, answer) | {"run_dir": str(run_dir.path)}
    finally:
        bank.close()


def _world_and_bank(cfg: RunConfig, say):
    """The world (embedded or local: agent.world.interface) and the bank, its L(0) built once."""
    from agent.world.interface import seed_cards, world_for
    from experience_bank.bank import Bank

    from agent.progress import reporter

    name = "local" if cfg.base_model is not None else cfg.world
    with reporter(f"world {name}", cfg.quiet, say) as progress:
        world = world_for(cfg, progress)
    if not Path(cfg.bank).exists():
        from agent.world.seed_bank import build_seed_bank

        say(f"building the seed bank of world {name} at {cfg.bank} (once)")
        with reporter("seed bank", cfg.quiet, say) as progress:
            build_seed_bank(world, cfg.bank, progress, cards=seed_cards(cfg))
    return world, Bank.open(cfg.bank)


def _allowlist(world, bank):
    from agent.proposer import Allowlist

    return Allowlist(datasets=dict(world.datasets), taken_ids=frozenset(e.record.card.id for e in bank.library_records()))


def _freeze_new(cfg: RunConfig, budget_h: float, run_dir: RunDir, world, bank) -> Manifest:
    from agent.manifest import Evaluators, ModelAt, WorldId, build_manifest
    from agent.promotion import init_parent

    version = bank.current_library_version()
    hashes = [e.hash for e in bank.library_records(version)]
    evaluators = Evaluators(suites=tuple(WORLD_SUITES()), eval_protocol=world.eval_protocol, backend=cfg.backend,
                            n=cfg.eval_n, batch_size=cfg.eval_batch_size, seed=cfg.seed,
                            sizes={s: cfg.suite_n(s) for s in WORLD_SUITES() if cfg.suite_n(s) != cfg.eval_n})
    manifest = build_manifest(
        episode_id=run_dir.episode_id, config=cfg.model_dump(mode="json"), budget_h=budget_h,
        initial=ModelAt(dir=world.base_dir, sha256=world.model.sha256),
        world=WorldId(size=world.size, recipe_sha256=world.recipe_sha256,
                      chat_template_sha256=world.chat_template_sha256),
        library_version=version, candidate_hashes=hashes, evaluators=evaluators, datasets=dict(world.datasets),
        allowlist=_allowlist(world, bank).manifest())
    run_dir.path.mkdir(parents=True, exist_ok=True)
    if cfg.cards is not None:  # frozen before the manifest: a started run always has its cards
        from agent.usercards.folder import freeze, read_folder

        freeze(run_dir.path, read_folder(cfg.cards, _allowlist(world, bank).taken_ids))
    run_dir.freeze(manifest)
    init_parent(run_dir.path, world.base_dir, world.model.sha256)
    return manifest


def WORLD_SUITES():  # noqa: N802 - a constant, imported lazily with the world module
    from agent.world.store import SUITES

    return SUITES


def _context(cfg: RunConfig, run_dir: RunDir, manifest: Manifest, world, bank, say) -> Ctx:
    from agent.nodes_ports import WorldPorts
    from agent.proposer import load_proposals
    from trainers.ledger import Ledger

    from agent.usercards.folder import frozen

    entries = {} if cfg.cards_only else {e.hash: Entry(e.hash, e.record, e.conflicted)
                                         for e in bank.library_records(manifest.library_version)}
    entries |= {h: Entry(h, record) for h, record in frozen(run_dir.path)}  # the user's imported cards
    entries |= {e.hash: e for e in load_proposals(run_dir.path)}
    ports = WorldPorts(world, cfg, _allowlist(world, bank), manifest)
    return Ctx(rundir=run_dir, episode_id=run_dir.episode_id, manifest=manifest, entries=entries, ports=ports,
               bank=bank, ledger=Ledger(str(run_dir.ledger_file)), audit=RunAudit(run_dir, manifest))


@contextmanager
def _display(cfg: RunConfig, ctx: Ctx, say):
    """Live progress (budget left, node, candidate, last verdict); --quiet, or stdout that is
    not a terminal, gets log lines."""
    from agent.progress import live_display

    budget = ctx.manifest.budget_device_hours
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
