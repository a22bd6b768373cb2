"""MLflow tracking of a (fake-boundary) episode: runs, nested decision runs, ledger metrics, the
registry's champion, idempotence under resume and kill -9, and a tracker that is down.

The loop, the bank, parent.json and the MLflow store (SQLite) are real; the trainer, evaluator
and gate are the fakes of tests/support/graph_fakes.py. Run as a script (`python tests/test_tracking.py
RUN_DIR URI`) to drive one tracked fake episode (the kill/resume test does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import graph_fakes as fakes  # noqa: E402


class PromotingPorts(fakes.FakePorts):
    """The fake ports; a promotion also moves the real parent.json (agent.run.promotion.promote)."""

    def promote(self, run_dir, child_dir, verdict):
        from agent.run.promotion import promote

        dest = super().promote(run_dir, child_dir, verdict)
        promote(run_dir, dest, verdict)
        return dest


def tracked_fake(run_dir: Path, uri: str, said: list | None = None) -> dict:
    """One fake episode (real loop, policy, ledger, bank and manifest) under `tracked`, as run_episode runs it."""
    from agent.loop.episode import drive
    from agent.run.promotion import init_parent
    from agent.views.tracking import tracked

    ctx, initial, bank = fakes.make_ctx(run_dir)
    ctx.ports = PromotingPorts(run_dir)
    if not (run_dir / "parent.json").exists():  # a resumed episode keeps its pointer
        init_parent(run_dir, initial["parent_dir"], initial["parent_sha"])
    try:
        with tracked(ctx, enabled=True, uri=uri, say=(said if said is not None else []).append):
            return drive(ctx, initial, run_dir / "checkpoints.sqlite")
    finally:
        bank.close()


def _charges(run_dir: Path) -> list[dict]:
    from trainers.ledger import Ledger

    return Ledger(str(run_dir / "ledger.sqlite")).charges("E-fake")


def _client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _view(uri: str, run_dir: Path) -> dict:
    """What the store holds for episode E-fake, as plain values."""
    from agent.views.tracking import EXPERIMENT, lineage_name

    c = _client(uri)
    exp = c.get_experiment_by_name(EXPERIMENT).experiment_id
    episode = c.search_runs([exp], "tags.kind = 'episode'")
    decisions = c.search_runs([exp], "tags.kind = 'decision'", order_by=["params.seq ASC"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    lineage = lineage_name(manifest["config"]["world"], manifest["initial"]["sha256"])
    versions = c.search_model_versions(f"name = '{lineage}'")
    return {"episode": episode, "decisions": decisions, "versions": versions, "client": c, "lineage": lineage,
            "aliases": c.get_registered_model(lineage).aliases,
            "spent": [m.value for m in c.get_metric_history(episode[0].info.run_id, "ledger.spent_h")]}


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    """One tracked fake episode (shared: the store is read, or restored to what it was)."""
    tmp = tmp_path_factory.mktemp("tracked")
    said: list = []
    final = tracked_fake(tmp / "E-fake", f"sqlite:///{tmp / 'mlflow.db'}", said)
    return f"sqlite:///{tmp / 'mlflow.db'}", tmp / "E-fake", final, said


def test_episode_is_mirrored_with_decisions_ledger_and_champion(episode):
    uri, run_dir, final, said = episode
    assert said == [] and final["stage"] == 3
    v = _view(uri, run_dir)
    (ep,) = v["episode"]
    assert ep.info.status == "FINISHED"
    assert ep.data.tags["policy"] == "bcit" and ep.data.params["manifest_hash"] == final["manifest_hash"]
    outcomes = [(r.data.params["card"], r.data.tags["outcome"]) for r in v["decisions"]]
    assert outcomes == [("S01", "rejected"), ("S02", "promoted"), ("S03", "rolled_back"), ("S04", "trial_failed"),
                        ("S05", "promoted"), ("S06", "promoted")]
    by_card = {r.data.params["card"]: r for r in v["decisions"]}
    assert all(r.data.tags["mlflow.parentRunId"] == ep.info.run_id for r in v["decisions"])
    s03 = by_card["S03"].data
    assert s03.tags["rolled_back_by"] == "target" and s03.metrics["gate.target.passed"] == 0.0
    assert s03.metrics["gate.target.gain"] == -3.0 and s03.metrics["target_gain"] == -3.0
    assert "Q" in by_card["S02"].data.metrics and by_card["S01"].data.params["action"] == "reject"
    # the ledger: every charge one step; the last cumulative value is what the ledger says was spent
    charges = _charges(run_dir)
    assert len(v["spent"]) == len(charges) and abs(v["spent"][-1] - sum(c["device_hours"] for c in charges)) < 1e-9
    # registry: every fully trained child a version (registered as the challenger before its gate),
    # three promoted; champion = parent.json's parent, previous = the one before
    assert sorted(int(x.version) for x in v["versions"]) == [1, 2, 3, 4]
    parent = json.loads((run_dir / "parent.json").read_text())
    champion = v["client"].get_model_version_by_alias(v["lineage"], "champion")
    assert champion.tags["sha256"] == parent["parent"]["sha256"] and champion.tags["candidate"] == "S06"
    assert v["client"].get_model_version_by_alias(v["lineage"], "previous").tags["candidate"] == "S05"
    (s03v,) = [x for x in v["versions"] if x.tags["candidate"] == "S03"]
    assert s03v.tags["outcome"] == "rolled_back" and "model_card" not in s03v.tags  # no card: never promoted
    assert "challenger" not in v["aliases"]  # every child was committed
    assert all(x.tags["model_card"] == str(Path(x.source) / "README.md") for x in v["versions"]
               if x.tags["candidate"] != "S03")
    artifacts = {a.path for a in v["client"].list_artifacts(ep.info.run_id)}
    assert {"manifest.json", "parent.json", "report.md", "report.html", "captrack_heatmap.png"} <= artifacts


def test_second_sync_and_half_logged_run_log_nothing_twice(episode):
    from agent.views.registry import CHAMPION

    uri, run_dir, _, _ = episode
    v = _view(uri, run_dir)
    c = v["client"]
    # what a kill -9 can leave: a decision run not yet FINISHED, the alias not yet moved
    c.update_run(v["decisions"][2].info.run_id, "RUNNING")
    c.delete_registered_model_alias(v["lineage"], CHAMPION)
    said: list = []
    tracked_fake(run_dir, uri, said)  # finished already: the graph does nothing, the tracker syncs
    again = _view(uri, run_dir)
    assert said == []
    assert [r.data.params["card"] for r in again["decisions"]] == [r.data.params["card"] for r in v["decisions"]]
    assert all(r.info.status == "FINISHED" for r in again["decisions"])
    assert len(again["versions"]) == 4 and again["aliases"] == v["aliases"]
    assert again["spent"] == v["spent"]


@pytest.mark.slow  # two processes of the whole loop (about 8 s); the resync test covers the same keys quickly
def test_kill_9_then_resume_registers_each_promotion_once(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = tmp_path / "E-fake"
    script = [sys.executable, __file__, str(run_dir), uri]
    env = {k: v for k, v in os.environ.items() if k != "FAKE_KILL"}
    killed = subprocess.run(script, env=env | {"FAKE_KILL": "appended:S06"}, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    # S02, S03 and S05 were synced before the kill; S06 was registered as the challenger after its run
    assert len(_view(uri, run_dir)["versions"]) == 4
    resumed = subprocess.run(script, env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    v = _view(uri, run_dir)
    assert [x.tags["candidate"] for x in sorted(v["versions"], key=lambda x: int(x.version))] == ["S02", "S03", "S05", "S06"]
    assert len(v["decisions"]) == 6 and len({r.data.tags["decision_hash"] for r in v["decisions"]}) == 6
    assert v["episode"][0].info.status == "FINISHED" and len(v["episode"]) == 1


def test_a_tracker_that_is_down_warns_once_and_the_episode_goes_on(tmp_path):
    reference = fakes.run_fake(tmp_path / "ref")
    said: list = []
    start = time.monotonic()
    final = tracked_fake(tmp_path / "E-fake", "http://127.0.0.1:9", said)
    assert time.monotonic() - start < 60
    assert len(said) == 1 and "http://127.0.0.1:9" in said[0] and "--resume" in said[0], said
    assert {k: final[k] for k in ("stage", "seq", "stop_reason")} == {k: reference[k] for k in ("stage", "seq", "stop_reason")}
    assert json.loads((tmp_path / "E-fake" / "parent.json").read_text())["promotions"] == 3


START = """import sys; from pathlib import Path; from agent.views.tracking import Tracker
said = []
t = Tracker(sys.argv[1], Path(sys.argv[2]), said.append)
t.start({"episode_id": Path(sys.argv[2]).name, "config": {"policy": "bcit", "world": "w"}, "budget_device_hours": 1.0,
         "library_version": 1, "manifest_hash": "0" * 64, "initial": {"sha256": "1" * 64}})
print(said)"""


@pytest.mark.slow  # three processes; without the store lock two of three lost the race to alembic
def test_episodes_started_together_share_a_fresh_store(tmp_path):
    """`agent compare --jobs N` on a fresh folder: N processes create the SQLite store at once."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [subprocess.Popen([sys.executable, "-c", START, uri, str(tmp_path / f"ep-{i}")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [(p.returncode, o.strip()) for p, (o, _) in zip(procs, outs)] == [(0, "[]")] * 3, outs
    assert not any("Warning" in err for _, err in outs)
    from agent.views.tracking import EXPERIMENT

    c = _client(uri)
    runs = c.search_runs([c.get_experiment_by_name(EXPERIMENT).experiment_id], "tags.kind = 'episode'")
    assert sorted(r.data.tags["episode_id"] for r in runs) == ["ep-0", "ep-1", "ep-2"]


def test_no_tracking_writes_no_store_but_holds_the_run_lock(tmp_path, monkeypatch):
    from agent.run.runlock import running
    from agent.views.tracking import tracked

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ctx, initial, bank = fakes.make_ctx(tmp_path / "E-fake")
    try:
        with tracked(ctx, enabled=False, uri=None) as tracker:
            assert tracker is None and running(tmp_path / "E-fake")
        assert not running(tmp_path / "E-fake")
    finally:
        bank.close()
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlartifacts").exists()


def test_tracking_uri_precedence(tmp_path, monkeypatch):
    from agent.views.tracking import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracker:5000")
    assert tracking_uri(None, tmp_path) == "http://tracker:5000"
    assert tracking_uri("sqlite:///x.db", tmp_path) == "sqlite:///x.db"


def test_run_flags_reach_the_config():
    from agent.cli.main import build_parser
    from agent.cli.run import cmd_run  # noqa: F401 (the command exists)
    from agent.config import FLAG_KEYS, build_config

    args = build_parser().parse_args(["run", "--no-tracking", "--tracking-uri", "http://h:1"])
    cfg = build_config(None, {k: getattr(args, k) for k in FLAG_KEYS})
    assert cfg.tracking is False and cfg.tracking_uri == "http://h:1"
    assert build_config(None, {}).tracking is True


def test_comparison_is_one_run_that_parents_its_episodes(tmp_path):
    from agent.experiments.compare_stats import summarise
    from agent.experiments.compare_output import write_outputs
    from agent.views.tracking import EXPERIMENT, Tracker, log_comparison
    from test_compare import _ep

    out = tmp_path / "cmp"
    episodes = [_ep("a", s, v) | {"run_dir": str(out / "episodes" / f"a-s{s}")} for s, v in enumerate([42.0, 44.0])]
    episodes += [_ep("b", s, v) | {"run_dir": str(out / "episodes" / f"b-s{s}")} for s, v in enumerate([40.0, 41.0])]
    write_outputs(out, summarise(episodes), episodes, {"policies": ["a", "b"], "seeds": [0, 1], "budget": "10h",
                                                         "config": None, "jobs": 1, "wall_s": 1.0})
    said: list = []
    for ep in episodes:  # each episode's own run, as `agent run` started it
        run_dir = Path(ep["run_dir"])
        Tracker(f"sqlite:///{out / 'episodes' / 'mlflow.db'}", run_dir, said.append).start(
            {"episode_id": run_dir.name, "config": {"policy": ep["policy"], "world": "fake"}, "budget_device_hours": 10.0,
             "library_version": 1, "manifest_hash": "0" * 64, "initial": {"sha256": "1" * 64}})
    rid = log_comparison(out, say=said.append)
    assert said == [] and log_comparison(out, say=said.append) == rid  # a resumed comparison reuses its run
    c = _client(f"sqlite:///{out / 'episodes' / 'mlflow.db'}")
    run = c.get_run(rid)
    assert run.data.metrics["policies.a.endpoint_mean"] == 43.0 and run.data.metrics["pairs.a_vs_b.endpoint.mean_diff"] == 2.5
    assert {"compare.md", "compare.json", "endpoint.png", "trajectories.png"} <= {a.path for a in c.list_artifacts(rid)}
    exp = c.get_experiment_by_name(EXPERIMENT).experiment_id
    children = c.search_runs([exp], f"tags.`mlflow.parentRunId` = '{rid}'")
    assert sorted(r.data.tags["episode_id"] for r in children) == ["a-s0", "a-s1", "b-s0", "b-s1"]


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in tracked_fake(Path(sys.argv[1]), sys.argv[2]).items()
                      if k in ("stop_reason", "seq")}))
