"""MLflow tracking and model registry: a view of an episode, never its source of truth.

The bank, the ledger and `parent.json` decide; this module copies what they recorded into
MLflow after every `commit` and at the end of the episode, so a user follows the episode in
the MLflow UI next to their other runs and finds the current parent in the model registry
under the alias `champion`:

- one run per episode (tag `episode_id`), the frozen manifest as parameters and tags;
- one nested run per decision (tag `decision_hash`): card, S/A/H/Q, action, rule, outcome,
  trial and full-run metrics, the trainer's final log, every gate check;
- the ledger's charges as metrics over steps of the episode run (`ledger.charge_h`,
  `ledger.spent_h`, `budget.left_h`);
- a promoted child as a new version of the registered model named after the lineage (world +
  initial parent; agent/views/registry.py), alias `champion` on the version whose weights `parent.json` names, the
  champion it replaced keeps `previous`; a rolled-back child is a decision run tagged with
  the deciding gate check;
- a fully trained child is registered as soon as its run ends and carries the alias
  `challenger` while the gate evaluates it; its commit takes the alias away (a promoted one
  becomes `champion`, a rolled-back one keeps its version tagged `outcome=rolled_back`). A
  version's tag `model_card` names the Hugging Face card in the model folder
  (agent/modelcard.py), written at promotion.

Idempotent: everything is keyed by (episode, decision hash) and searched for before it is
created, so a resumed episode (after kill -9) or a second sync logs nothing twice. A nested
run is marked FINISHED only after all its values landed; one left RUNNING by a crash is
deleted and logged again. A tracker that fails (server down, locked database) warns once and
switches itself off for the process; the run files are untouched and `agent run --resume ID`
syncs again from them. Registry writes cannot share a transaction with `parent.json`: the
file is written first, and the alias follows it on the same or the next sync.

Out of scope: TRL's own `report_to="mlflow"` (its callback opens and ends runs of its own and
logs ~200 TrainingArguments as parameters, which clash between a trial and its full run), so
trainer curves are the final metrics TRL returned (`TrainResult.log`), logged here.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent.run.rundir import RunDir
from agent.run.runlock import hold
from agent.views.registry import mark_challenger, register, settle_challenger

EXPERIMENT = "posttrain-agent"
_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")
# A down server must cost seconds, not MLflow's default minutes of retries; a user's own setting wins.
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0.5",
                  "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
LOCK_WAIT_S = 60.0
"""Longest wait for another process's hold on `<store>.lock` (creating MLflow's tables takes
seconds); past it the tracker warns once and the episode goes on without it."""


def tracking_uri(configured: str | None, runs_folder: Path) -> str:
    """The flag or config key, else MLFLOW_TRACKING_URI, else a SQLite store in the runs folder."""
    if configured:
        return configured
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(runs_folder / 'mlflow.db').resolve()}"


def _check_store(uri: str) -> None:
    """SQLAlchemy ends a sqlite:/// path at its first '?' and reads the rest as options, so a
    runs folder named `a?b` would put the store at `a` (outside the folder); no escape exists.
    Options (`?timeout=20`) hold no '/', a path after the '?' always does."""
    if uri.startswith("sqlite:///") and "/" in uri.partition("?")[2]:
        raise ValueError(f"the store path {uri.removeprefix('sqlite:///')} holds a '?', which a SQLite "
                         "tracking URI cannot carry: rename the runs folder, or pass --tracking-uri")


def lineage_name(world: str, initial_sha: str) -> str:
    """Registered model of every parent promoted from one initial model."""
    return f"posttrain-{world}-{initial_sha[:12]}"


def _key(name: str) -> str:
    return _KEY.sub("_", name)[:250]


def _numbers(prefix: str, values: Mapping[str, Any]) -> dict[str, float]:
    """Numeric values only (bools as 0/1); strings and None stay out of the metrics."""
    return {_key(f"{prefix}{k}"): float(v) for k, v in values.items() if isinstance(v, (int, float))}


def plain(manifest: Any) -> dict[str, Any]:
    """The manifest as JSON values: the loop's typed Manifest record, or its JSON already."""
    return dict(manifest) if isinstance(manifest, Mapping) else manifest.model_dump(mode="json")


def _dump(record: Any) -> dict | None:
    return None if record is None else record.model_dump(mode="json")


class Tracker:
    """One episode's MLflow view. Every public method is a no-op once the tracker is down."""

    def __init__(self, uri: str, run_dir: Path, say: Callable[[str], None]):
        self.uri, self.run_dir, self.say = uri, run_dir, say
        self.rundir = RunDir(run_dir)
        self.down = False
        self._client = self._run_id = None

    # --- the guard: warn once, then stay off ------------------------------------------------

    def _guarded(self, what: str, fn: Callable[[], Any]) -> Any:
        if self.down:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 (a view must never end the episode it watches)
            self.down = True
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            self.say(f"agent: warning: MLflow tracking at {self.uri} failed while {what} "
                     f"({type(exc).__name__}: {first}); the episode goes on without it, its run files are "
                     f"complete, and `agent run --resume {self.run_dir}` syncs them later")
            return None

    def _mlflow(self):
        if self._client is None:
            for name, value in _HTTP_DEFAULTS.items():
                os.environ.setdefault(name, value)
            for name in ("mlflow", "alembic"):
                logging.getLogger(name).setLevel(logging.WARNING)
            from mlflow import MlflowClient  # noqa: PLC0415 (1 s import, only when tracking)

            self._client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
        return self._client

    # --- the episode run --------------------------------------------------------------------

    def start(self, manifest: dict[str, Any]) -> None:
        """Find or create the episode's run; log the manifest (identical values re-log as no-ops)."""
        self._guarded("starting the episode run", lambda: self._serialised(lambda: self._start(plain(manifest))))

    def _serialised(self, fn: Callable[[], Any]) -> Any:
        """Run fn holding `<db>.lock` when the store is a local SQLite file: episodes started together
        (`agent compare --jobs N`) would otherwise race to create its tables (alembic's migrations
        are not safe to run twice at once). Alembic's notes on its own migration steps are silenced."""
        _check_store(self.uri)
        if not self.uri.startswith("sqlite:///"):
            return fn()

        lock = Path(self.uri.removeprefix("sqlite:///").split("?", 1)[0] + ".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "a") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            _lock_within(f.fileno(), LOCK_WAIT_S, lock)  # released when the file closes
            return fn()

    def _experiment(self, client) -> str:
        found = client.get_experiment_by_name(EXPERIMENT)
        if found is not None:
            return found.experiment_id
        local = self.uri.startswith("sqlite:")  # a server chooses its own artifact store
        where = (self.run_dir.parent / "mlartifacts").resolve().as_uri() if local else None
        return client.create_experiment(EXPERIMENT, artifact_location=where)

    def _start(self, manifest: dict[str, Any]) -> None:
        from mlflow.entities import Param, RunTag  # noqa: PLC0415

        client = self._mlflow()
        exp = self._experiment(client)
        episode = manifest["episode_id"]
        self.experiment_id = exp
        found = client.search_runs([exp], f"tags.episode_id = '{episode}' and tags.kind = 'episode'", max_results=1)
        cfg = manifest["config"]
        tags = {"kind": "episode", "episode_id": episode, "mlflow.runName": episode, "policy": cfg["policy"],
                "world": cfg["world"], "budget_device_hours": str(manifest["budget_device_hours"]),
                "library_version": str(manifest["library_version"]), "manifest_hash": manifest["manifest_hash"],
                "initial_sha256": manifest["initial"]["sha256"], "run_dir": str(self.run_dir.resolve())}
        run = found[0] if found else client.create_run(exp, tags=tags, run_name=episode)
        self._run_id = run.info.run_id
        params = {f"config.{k}": v for k, v in cfg.items()} | {
            "budget_device_hours": manifest["budget_device_hours"], "library_version": manifest["library_version"],
            "manifest_hash": manifest["manifest_hash"], "initial_sha256": manifest["initial"]["sha256"]}
        client.log_batch(self._run_id, params=[Param(_key(k), str(v)[:6000]) for k, v in params.items()],
                         tags=[RunTag(k, v) for k, v in tags.items()])

    # --- decisions, ledger, registry --------------------------------------------------------

    def sync(self, events: list, charges: list[dict], cards: Mapping[str, dict], lineage: str) -> None:
        """Bring MLflow up to what the run recorded: decision runs, ledger metrics, registry."""
        if self._run_id is None:
            return
        self._guarded("syncing decisions", lambda: self._sync(events, charges, cards, lineage))

    def _sync(self, events: list, charges: list[dict], cards: Mapping[str, dict], lineage: str) -> None:
        client = self._mlflow()
        done = self._decision_runs(client)
        for event in events:
            dh = event.decision.decision_hash
            if dh in done and done[dh].info.status == "FINISHED":
                continue
            if dh in done:  # half-logged by a killed process: log it again from scratch
                client.delete_run(done[dh].info.run_id)
            done[dh] = self._log_decision(client, event, cards.get(event.decision.features.record_hash, {}))
        self._log_ledger(client, charges)
        promoted = [e for e in events if e.outcome == "promoted"]
        if promoted:
            register(client, self.rundir, promoted, done, lineage)
        settle_challenger(client, self.rundir, events, done, lineage)

    def _decision_runs(self, client) -> dict[str, Any]:
        runs = client.search_runs([self.experiment_id], f"tags.`mlflow.parentRunId` = '{self._run_id}'",
                                  max_results=5000)
        return {r.data.tags["decision_hash"]: r for r in runs if "decision_hash" in r.data.tags}

    def _log_decision(self, client, event, card: dict):
        from mlflow.entities import Metric, Param  # noqa: PLC0415

        d, f = event.decision, event.decision.features
        dh, rd = d.decision_hash, self.rundir
        verdict, trial, train = _dump(rd.verdict(dh)), _dump(rd.trial(dh)), _dump(rd.train(dh))
        tags = {"mlflow.parentRunId": self._run_id, "kind": "decision", "episode_id": event.episode_id,
                "decision_hash": d.decision_hash, "candidate": event.candidate_id, "action": event.action,
                "rule": d.rule, "outcome": event.outcome, "mlflow.runName": f"{event.seq:03d} {event.candidate_id}"}
        if verdict is not None:
            tags["gate.decided_by"] = verdict["decided_by"]
        if event.outcome == "rolled_back":
            tags["rolled_back_by"] = verdict["decided_by"] if verdict else event.reason[:250]
        run = client.create_run(self.experiment_id, tags=tags, run_name=tags["mlflow.runName"])
        rid = run.info.run_id
        params = {"card": event.candidate_id, "action": event.action, "rule": d.rule, "outcome": event.outcome,
                  "policy": d.policy, "policy_version": d.policy_version, "grade": "new" if f.is_new else f.grade,
                  "nu": f.nu, "conflicts": ",".join(f.conflicts) or "-", "seq": event.seq,
                  "reason": event.reason[:500]} | {f"card.{k}": v for k, v in card.items() if k in (
                      "method", "family", "title", "nu")}
        values = {"S": f.S, "A": f.A, "H": f.H, "Q": f.Q, "cost_device_hours": event.cost_device_hours,
                  "wall_seconds": event.wall_seconds}
        extra = event.model_dump(mode="json")  # the typed effects (target gain, trial delta, IFEval), where recorded
        metrics = _numbers("", values) | _numbers("", event.metrics) | _numbers("decision.", d.numbers)
        metrics |= _numbers("", {k: extra.get(k) for k in ("target_gain", "trial_delta")})
        metrics |= _numbers("retention.", extra.get("retention") or {})
        metrics |= _numbers("trial.retention.", extra.get("trial_retention") or {})
        metrics |= _numbers("trial.train.", (trial or {}).get("train", {}).get("log", {}))
        metrics |= _numbers("train.", (train or {}).get("log", {}))
        for check in (verdict or {}).get("checks", []):
            metrics |= {f"gate.{check['name']}.passed": float(check["passed"])}
            metrics |= _numbers(f"gate.{check['name']}.", check["numbers"])
        client.log_batch(rid, metrics=[Metric(k, v, 0, event.seq) for k, v in metrics.items()],
                         params=[Param(_key(k), str(v)[:6000]) for k, v in params.items()])
        client.log_dict(rid, d.model_dump(mode="json"), "decision.json")
        if card:
            client.log_dict(rid, card, "card.json")
        if verdict is not None:
            client.log_dict(rid, verdict, "verdict.json")
        client.set_terminated(rid, "FINISHED")
        return client.get_run(rid)

    def _log_ledger(self, client, charges: list[dict]) -> None:
        """Each charge once, as one step of the episode run (the count already logged is the cursor)."""
        from mlflow.entities import Metric  # noqa: PLC0415

        logged = len(client.get_metric_history(self._run_id, "ledger.spent_h"))
        spent = sum(float(c["device_hours"]) for c in charges[:logged])
        budget = float(client.get_run(self._run_id).data.params["budget_device_hours"])
        batch = []
        for i, charge in enumerate(charges[logged:], start=logged):
            spent += float(charge["device_hours"])
            batch += [Metric("ledger.charge_h", float(charge["device_hours"]), 0, i),
                      Metric("ledger.spent_h", spent, 0, i), Metric("budget.left_h", budget - spent, 0, i)]
        if batch:
            client.log_batch(self._run_id, metrics=batch)

    # --- the challenger: the child the gate is evaluating ----------------------------------

    def challenger(self, lineage: str, decision_hash: str, candidate: str) -> None:
        """Register a fully trained child and point `challenger` at it (before its gate)."""
        if self._run_id is None:
            return

        self._guarded("registering the challenger", lambda: self._serialised(
            lambda: mark_challenger(self._mlflow(), self.rundir, lineage, decision_hash, candidate)))

    # --- the end ------------------------------------------------------------------------------

    def finish(self, finished: bool) -> None:
        """Attach the report files and the heat map; close the run (FINISHED) when the episode ended."""
        if self._run_id is None:
            return
        self._guarded("attaching the report", lambda: self._finish(finished))

    def _finish(self, finished: bool) -> None:
        client = self._mlflow()
        rd = self.rundir
        for path in (rd.manifest_file, rd.parent_file, rd.decisions_file, rd.outcomes_file, rd.report_md,
                     rd.report_html, rd.heatmap_png, rd.heatmap_json):
            if path.is_file():
                client.log_artifact(self._run_id, str(path))
        if finished:
            client.set_terminated(self._run_id, "FINISHED")


def _lock_within(fd: int, wait_s: float, path: Path) -> None:
    """An exclusive flock on fd, or TimeoutError after wait_s (another process may hold it for ever)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"another process has held {path} for over {wait_s:g} s") from None
            time.sleep(0.05)


def _warn(text: str) -> None:
    print(text, file=sys.stderr)


@contextmanager
def tracked(ctx, *, enabled: bool, uri: str | None, say: Callable[[str], None] = _warn) -> Iterator[Tracker | None]:
    """The episode's outside observers, for as long as the graph runs: the run's lock (so
    `agent runs ls` tells a live run from a killed one) and, when enabled, the MLflow view,
    synced after every `commit` and at the end.

    `ctx` is the episode's runtime context (agent.loop.state.Ctx): the bank's events, the ledger's
    charges and the entries' cards are read from it; everything else from the run directory.
    """
    with hold(ctx.run_dir):
        if not enabled:
            yield None
            return
        tracker = Tracker(tracking_uri(uri, ctx.run_dir.parent), ctx.run_dir, say)
        manifest = plain(ctx.manifest)
        tracker.start(manifest)
        inner = ctx.progress
        lineage = lineage_name(manifest["config"]["world"], manifest["initial"]["sha256"])

        def sync() -> None:
            cards = {h: e.record.card.model_dump(mode="json") for h, e in ctx.entries.items()}
            tracker.sync(ctx.bank.events(ctx.episode_id), ctx.ledger.charges(ctx.episode_id), cards, lineage)

        def progress(node: str, update: dict[str, Any]) -> None:
            inner(node, update)
            if node == "train" and update.get("train_status") == "done":
                tracker.challenger(lineage, update["decision_hash"], update["candidate_id"])
            if node == "commit":
                sync()

        ctx.progress = progress
        try:
            yield tracker
        finally:
            ctx.progress = inner
        sync()
        tracker.finish(finished=RunDir(ctx.run_dir).finished())


def _flat(prefix: str, value: Any) -> dict[str, float]:
    """Nested numbers of a summary as `a.b.c` metrics (lists and strings stay in the JSON artifact)."""
    if isinstance(value, dict):
        return {k: v for key, sub in value.items() for k, v in _flat(f"{prefix}{key}.", sub).items()}
    return _numbers("", {prefix[:-1]: value}) if isinstance(value, (int, float)) and value is not None else {}


def log_comparison(out: Path, uri: str | None = None, say: Callable[[str], None] = _warn) -> str | None:
    """`agent compare`'s table and figures as one MLflow run, the parent of its episodes' runs.

    Reads what compare wrote (compare.json, compare.md, the PNGs) and the episodes' runs in the
    same store (sqlite:///<out>/episodes/mlflow.db unless a URI is given); found again by its
    `compare_dir` tag, so a resumed comparison updates its run instead of adding one.
    Returns the run id (None when the tracker is down: warned once, nothing else changes).
    """
    tracker = Tracker(tracking_uri(uri, out / "episodes"), out / "episodes" / "compare", say)
    return tracker._guarded("logging the comparison",  # noqa: SLF001 (this module's own Tracker)
                            lambda: tracker._serialised(lambda: _log_comparison(tracker, out)))  # noqa: SLF001


def _log_comparison(tracker: Tracker, out: Path) -> str:
    from mlflow.entities import Metric, RunTag  # noqa: PLC0415

    client = tracker._mlflow()  # noqa: SLF001 (this module's own Tracker)
    exp = tracker._experiment(client)  # noqa: SLF001
    where = str(out.resolve())
    found = client.search_runs([exp], f"tags.kind = 'compare' and tags.compare_dir = '{where}'", max_results=1)
    run = found[0] if found else client.create_run(exp, tags={"kind": "compare", "compare_dir": where},
                                                   run_name=f"compare {out.name}")
    rid = run.info.run_id
    data = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    metrics = _flat("", {"policies": data["summary"]["policies"], "pairs": data["summary"]["pairs"]})
    client.log_batch(rid, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                     tags=[RunTag("policies", ",".join(data["meta"]["policies"])),
                           RunTag("seeds", str(len(data["meta"]["seeds"])))])
    for name in ("compare.md", "compare.json", "endpoint.png", "trajectories.png"):
        if (out / name).is_file():
            client.log_artifact(rid, str(out / name))
    for ep in data["episodes"]:  # nest each episode's run under the comparison
        if "run_dir" not in ep:
            continue  # an episode that failed before its run directory was read
        path = str(Path(ep["run_dir"]).resolve())
        for r in client.search_runs([exp], f"tags.kind = 'episode' and tags.run_dir = '{path}'"):
            client.set_tag(r.info.run_id, "mlflow.parentRunId", rid)
    client.set_terminated(rid, "FINISHED")
    return rid
