"""The composition of one episode: validate the inputs, freeze the manifest, run or resume the graph.

Order matters: every input is checked (config, budget, world/model, bank schema, proposer
settings) before the run directory is created, so bad input writes nothing. The manifest is
frozen and hashed before the first node. The graph runs under LangGraph's SQLite
checkpointer (`runs/ID/checkpoints.sqlite`) with durability="sync" and a JSON-only
serializer (no pickle fallback, no msgpack object revival: a checkpoint is data, never code), so
`agent run --resume ID` continues at the node that was running when the process died.
"""

from __future__ import annotations

import re
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from agent.config import RunConfig
from agent.loop.charges import check_budget
from agent.loop.graph import build_graph
from agent.run.audit import RunAudit
from agent.run import extrapolation_model
from agent.run.gonogo_model import check_resume, freeze_copy, read_model
from agent.run.checkpoints import strict_serde
from agent.run.killpoints import kill_point
from agent.run.manifest import Manifest
from agent.run.rundir import RunDir
from agent.loop.state import Ctx, Entry
from agent.run.approvals import kinds
from agent.world.usercards.folder import freeze, frozen, library_cards, read_folder, with_evidence
from langgraph.types import Command
from experience_bank.errors import BadInput, Busy, WriteFault, fault_path, full_file_system, write_fault
from agent.inputs import check_bank_file
from agent import progress as display
from agent.world.factory import seed_cards, world_for
from agent.world.local import local_world
from agent.world.store import SUITES
from evaluators.generate import check_backend
from policies import POLICIES
from trainers.launch import check_launch
from agent.loop.ports import WorldPorts
from agent.loop.proposer import Allowlist, load_proposals
from agent.run.manifest import Evaluators, ModelAt, WorldId, build_manifest, cost_of
from agent.run.promotion import init_parent
from agent.views.tracking import tracked
from agent.world.seed_bank import build_seed_bank, foreign_seed_bank
from experience_bank.bank import Bank
from trainers.ledger import Ledger, parse_budget


IDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")

RECURSION_LIMIT = 100_000
"""Supersteps: about five per candidate, so any catalogue fits."""


def drive(ctx: Ctx, initial: dict[str, Any], checkpoints: Path, answer: dict | None = None) -> dict[str, Any]:
    """Run the graph to its end, or resume it from its last checkpoint; return the final state.
    `answer` resumes an episode paused for approval (agent/loop/approval.py) with a person's answer."""
    conn = sqlite3.connect(str(checkpoints), check_same_thread=False)
    try:
        graph = build_graph(SqliteSaver(conn, serde=strict_serde()))
        config = {"configurable": {"thread_id": ctx.episode_id}, "recursion_limit": RECURSION_LIMIT}
        snapshot = graph.get_state(config)
        if snapshot.values and not snapshot.next:
            return dict(snapshot.values)  # finished already
        start = None if snapshot.values else initial
        if answer is not None:
            start = Command(resume=answer)
        for chunk in graph.stream(start, config, context=ctx, durability="sync", stream_mode="updates"):
            for node, update in chunk.items():
                if node == "__interrupt__":  # paused for approval (agent/loop/approval.py): no node ran
                    continue
                ctx.progress(node, update or {})
                kill_point(node)  # a test hook, inert unless AGENT_KILL_AT is set (agent/run/killpoints.py)
        return dict(graph.get_state(config).values)
    finally:
        conn.close()


# --- the composition ---------------------------------------------------------------------


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

    budget_h = parse_budget(cfg.episode_budget)
    check_budget(budget_h, cost_of(cfg))
    if cfg.policy not in POLICIES:
        raise BadInput(f"unknown policy {cfg.policy!r}: choose one of {', '.join(POLICIES)}")
    if cfg.proposer == "openai" and not (cfg.base_url and cfg.model):
        raise BadInput("--proposer openai needs --base-url URL and --model NAME")
    if cfg.base_model is not None:
        local_world(cfg)  # model folder, every dataset file and pool: checked, nothing written

    check_backend(cfg.backend)
    kinds(cfg.approve)
    if cfg.cards is not None or cfg.cards_only:
        if cfg.cards is None:
            raise BadInput("--cards-only needs --cards DIR (the folder of imported recipes)")
        read_folder(cfg.cards)
    check_launch(cfg.launcher, cfg.deepspeed_config)
    read_model(cfg)  # bcit_predictive's go/no-go: given, readable, a model
    extrapolation_model.read_model(cfg)  # the trial's forgetting extrapolation, where given: readable, a fit
    bank = Path(cfg.bank)
    check_bank_file(bank)  # before Bank.open, which would migrate a stray file into a bank
    if bank.exists():
        Bank.open(bank).close()  # refuses a bank from a newer schema
    return budget_h


def run_episode(cfg: RunConfig, resume: str | None = None, say=print, answer: dict | None = None) -> dict[str, Any]:
    """Run (or resume) one episode; return its final state (with `run_dir`). `answer`: a
    person's approval of the decision the episode waits on (agent approve)."""
    budget_h, manifest = None, None
    if resume:
        run_dir = _run_dir(cfg, resume)
        manifest = run_dir.manifest()
        run_dir.check_resumable(manifest)
        cfg = manifest.config.model_copy(update={"quiet": True}) if cfg.quiet else manifest.config
    else:
        budget_h = check_inputs(cfg)
        run_dir = _run_dir(cfg, None)
    try:
        return _run(cfg, resume, say, run_dir, budget_h, manifest, answer)
    except (OSError, sqlite3.Error, RuntimeError, WriteFault, Busy) as exc:
        raise _refused(exc, run_dir) from None


def _refused(exc: BaseException, run_dir: RunDir) -> BaseException:
    """A refused write (full disk, read-only, no permission) anywhere in an episode as one line:
    exit 2 before the manifest is frozen (nothing decided), else exit 1 with the resume command
    (every step is atomic and checkpointed). Any other error is returned as it was; a bank held
    by another writer mid-episode gets the resume command too."""
    if isinstance(exc, Busy):
        return Busy(f"{exc}; then resume with `agent run --resume {run_dir.path}`", 1) if run_dir.started() else exc
    where = f"the run directory {run_dir.path}"
    fault = exc if isinstance(exc, WriteFault) else write_fault(exc, fault_path(exc) or where,
                                                                file=run_dir.checkpoints_file)
    if fault is None:  # no errno (torch's writer): the run directory's file system may say why
        fault = full_file_system(run_dir.checkpoints_file, where)
    if fault is None:
        return exc
    if run_dir.started():
        return fault.retold(f"resume with `agent run --resume {run_dir.path}`", 1)
    return fault.retold("run the command again", 2)


def _run(cfg: RunConfig, resume: str | None, say, run_dir: RunDir, budget_h, manifest,
         answer: dict | None = None) -> dict[str, Any]:
    world, bank = _world_and_bank(cfg, say)
    try:
        if not resume:
            manifest = _freeze_new(cfg, budget_h, run_dir, world, bank)
        elif world.model.sha256 != manifest.initial.sha256:  # the world was built again, elsewhere or otherwise
            raise BadInput(f"{run_dir.path} ran on base weights {manifest.initial.sha256[:12]}, but world "
                           f"{world.size}-{world.recipe_sha256[:12]} has {world.model.sha256[:12]}: resume it where "
                           "its world was built, or start a new run")
        else:
            check_resume(run_dir, manifest)  # the go/no-go the run froze, unchanged
            extrapolation_model.check_resume(run_dir, manifest)  # and its extrapolation
        ctx = _context(cfg, run_dir, manifest, world, bank, say)
        bank.start_episode(ctx.episode_id, manifest.manifest_hash, manifest.library_version)
        initial = {"episode_id": ctx.episode_id, "manifest_hash": manifest.manifest_hash, "cursor": 0, "seq": 0,
                   "stage": 0, "parent_dir": manifest.initial.dir, "parent_sha": manifest.initial.sha256,
                   "lineage": list(world.model.lineage),
                   "spent_h": 0.0, "consecutive_rejections": 0, "proposals_authorized": 0, "leases_used": 0,
                   "stop_reason": None}

        with _display(cfg, ctx, say), tracked(ctx, enabled=cfg.tracking, uri=cfg.tracking_uri):
            return drive(ctx, initial, run_dir.checkpoints_file, answer) | {"run_dir": str(run_dir.path)}
    finally:
        bank.close()


def _world_and_bank(cfg: RunConfig, say):
    """The world (embedded or local: agent.world.interface) and the bank, its L(0) built once."""
    name = "local" if cfg.base_model is not None else cfg.world
    with display.reporter(f"world {name}", cfg.quiet, say) as progress:
        world = world_for(cfg, progress)
    if not Path(cfg.bank).exists():
        say(f"building the seed bank of world {name} at {cfg.bank} (once)")
        with display.reporter("seed bank", cfg.quiet, say) as progress:
            build_seed_bank(world, cfg.bank, progress, cards=seed_cards(cfg))
    bank = Bank.open(cfg.bank)
    other = foreign_seed_bank(world, (e.record for e in bank.library_records()))
    if other is not None:
        bank.close()
        raise BadInput(f"bank {cfg.bank} holds the seed bank of world {other}, not of this world "
                       f"{world.size}-{world.recipe_sha256[:12]} (world seed {world.seed}): pass --bank NEW.sqlite "
                       "to build this world's")
    return world, bank


def _allowlist(world, bank):
    return Allowlist(datasets=dict(world.datasets), taken_ids=frozenset(e.record.card.id for e in bank.library_records()))


def _freeze_new(cfg: RunConfig, budget_h: float, run_dir: RunDir, world, bank) -> Manifest:
    version = bank.current_library_version()
    hashes = [e.hash for e in bank.library_records(version)]
    evaluators = Evaluators(suites=tuple(SUITES), eval_protocol=world.eval_protocol, backend=cfg.backend,
                            n=cfg.target_n, batch_size=cfg.eval_batch, seed=cfg.seed,
                            sizes={s: cfg.suite_n(s) for s in SUITES if cfg.suite_n(s) != cfg.target_n})
    model, extrapolation = read_model(cfg, bank, version), extrapolation_model.read_model(cfg)
    manifest = build_manifest(
        episode_id=run_dir.episode_id, config=cfg, budget_h=budget_h,
        initial=ModelAt(dir=world.base_dir, sha256=world.model.sha256),
        world=WorldId(size=world.size, seed=world.seed, recipe_sha256=world.recipe_sha256,
                      chat_template_sha256=world.chat_template_sha256),
        library_version=version, candidate_hashes=hashes, evaluators=evaluators, datasets=dict(world.datasets),
        allowlist=_allowlist(world, bank).manifest(), gonogo=model[1] if model else None,
        extrapolation=extrapolation[1] if extrapolation else None)
    cards = read_folder(cfg.cards, library_cards(bank.library_records(version))) if cfg.cards is not None else None
    run_dir.path.mkdir(parents=True, exist_ok=True)
    if cards is not None:  # frozen before the manifest: a started run always has its cards
        freeze(run_dir, cards)
    if model is not None:  # and its go/no-go model
        freeze_copy(run_dir, model[0])
    if extrapolation is not None:  # and its extrapolation model
        extrapolation_model.freeze_copy(run_dir, extrapolation[0])
    run_dir.freeze(manifest)
    init_parent(run_dir.path, world.base_dir, world.model.sha256)
    return manifest


def _context(cfg: RunConfig, run_dir: RunDir, manifest: Manifest, world, bank, say) -> Ctx:
    library = bank.library_records(manifest.library_version)
    held, new = with_evidence(frozen(run_dir), library)  # the user's imported cards: their records, or new
    entries = {e.hash: Entry(e.hash, e.record, e.conflicted) for e in (held if cfg.cards_only else library)}
    entries |= {h: Entry(h, record) for h, record in new}
    entries |= {e.hash: e for e in load_proposals(run_dir.path)}
    ports = WorldPorts(world, cfg, _allowlist(world, bank), manifest)
    return Ctx(rundir=run_dir, episode_id=run_dir.episode_id, manifest=manifest, entries=entries, ports=ports,
               bank=bank, ledger=Ledger(str(run_dir.ledger_file)), audit=RunAudit(run_dir, manifest))


@contextmanager
def _display(cfg: RunConfig, ctx: Ctx, say):
    """Live progress (budget left, node, candidate, last verdict); --quiet, or stdout that is
    not a terminal, gets log lines."""
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
        if live:
            live[0].update(Text(line()))
        else:
            say(line())

    live: list = []  # the rich Live display, once open
    if not display.live_display(cfg.quiet):  # looked up on its module: tests set it
        ctx.progress = update
        yield
        return
    from rich.live import Live  # noqa: PLC0415 (rich, only on a terminal)
    from rich.text import Text  # noqa: PLC0415

    with Live(Text(line()), refresh_per_second=4, transient=False) as shown:
        live.append(shown)
        ctx.progress = update
        yield
