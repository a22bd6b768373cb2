"""The executor: compare and the retrospective give the same files on Ray as in this process.

Ray runs here as a local instance of 4 logical CPUs on this machine's cores (two 2-CPU tasks at
once, so two cells that share a matched control really run side by side). Its workers import
the fakes of these tests (this module, test_compare's FAKE_RUN, test_retrospective's FakePorts)
by name: the session's runtime_env puts tests/ on their PYTHONPATH; `agent` itself is the
installed package.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from support import bank_factory as bf
from agent.config import RunConfig
from agent.experiments import compare as C
from agent.experiments import retrospective as R
from agent.experiments.executor import (Job, LocalExecutor, Progress, RayExecutor, Resources, eta_s, progress_line, task_env,
                                        task_resources)
from experience_bank.hashing import content_hash
from test_compare import FAKE_RUN, fake_run
from test_retrospective import Card, FakePorts, _controls, _features

TESTS = str(Path(__file__).resolve().parent)
POLICIES = ["good", "meh", "broken", "gone"]
"""gone: its argv names no program, so run_one itself raises (the others exit, or fail with exit 1)."""


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, object_store_memory=80 * 1024 * 1024,
             runtime_env={"env_vars": {"PYTHONPATH": TESTS}})
    yield ray
    ray.shutdown()


def _argv_for(script: Path):
    def argv_for(out: Path, policy: str, seed: int) -> list[str]:
        if policy == "gone":
            return [str(out / "no-such-program")]
        argv = C.episode_argv(out, policy, seed, budget="10h", config=None)
        return [sys.executable, str(script)] + argv[argv.index("run") + 1:]
    return argv_for


def _script(path: Path, text: str = FAKE_RUN) -> Path:
    path.write_text(fake_run(text))
    return path


def _same_dir(value, out: Path):
    """The value with its own output directory written OUT (two runs differ only there)."""
    return json.loads(json.dumps(value, sort_keys=True).replace(str(out), "OUT"))


def _statuses(out: Path) -> dict[str, dict]:
    return {p.name: _same_dir({k: v for k, v in json.loads(p.read_text()).items() if k != "wall_s"}, out)
            for p in sorted((out / "jobs").iterdir())}


@pytest.fixture(scope="module")
def two_compares(ray_session, tmp_path_factory):
    """The same comparison run by the local executor (2 threads) and by Ray."""
    root = tmp_path_factory.mktemp("cmp")
    argv_for = _argv_for(_script(root / "fake_run.py"))
    local = C.compare(root / "local", POLICIES, [0, 1], n_jobs=2, argv_for=argv_for)
    start = time.monotonic()
    on_ray = C.compare(root / "ray", POLICIES, [0, 1], argv_for=argv_for,
                       executor=RayExecutor(task_resources(RunConfig())))
    return root, local, on_ray, time.monotonic() - start


def test_compare_on_ray_equals_local(two_compares):
    root, local, on_ray, _ = two_compares
    assert _same_dir(on_ray, root / "ray") == _same_dir(local, root / "local")
    good = on_ray["policies"]["good"]  # test-split endpoint 40 + 4 + seed - 0.5 over seeds 0 and 1
    assert good["n"] == 2 and good["endpoint_mean"] == pytest.approx(44.0)
    assert on_ray["pairs"]["good_vs_meh"]["endpoint"]["diffs"] == [3.0, 3.0]
    assert _statuses(root / "ray") == _statuses(root / "local")
    docs = {name: json.loads((root / name / "compare.json").read_text()) for name in ("local", "ray")}
    assert [docs[n]["meta"]["executor"] for n in ("local", "ray")] == ["local", "ray"]
    for part in ("summary", "episodes"):
        assert _same_dir(docs["ray"][part], root / "ray") == _same_dir(docs["local"][part], root / "local")


def test_ray_records_a_failing_job_without_touching_the_others(two_compares):
    root, _, on_ray, _ = two_compares
    failed = {(f["policy"], f["seed"]): f["error"] for f in on_ray["failed"]}
    assert sorted(failed) == [("broken", 0), ("broken", 1), ("gone", 0), ("gone", 1)]
    assert failed[("broken", 0)].startswith("exit 1;") and "simulated crash" in failed[("broken", 0)]
    # a job that raised (not a worker's crash) is recorded as the exception it raised
    assert failed[("gone", 1)].startswith("FileNotFoundError: [Errno 2]")
    assert json.loads((root / "ray" / "jobs" / "broken-s1.json").read_text())["status"] == "failed"
    for name in ("good-s0", "good-s1", "meh-s0", "meh-s1"):
        assert json.loads((root / "ray" / "jobs" / f"{name}.json").read_text())["status"] == "done"
        assert (root / "ray" / "episodes" / name / "report.md").read_text() == "done"
    assert on_ray["policies"]["meh"]["endpoint_mean"] == pytest.approx(41.0)


KILL_ONCE = '''
import os, signal
if policy == "meh" and seed == 2 and not (run_dir / "killed").exists():
    (run_dir / "killed").write_text("")
    os.kill(os.getpid(), signal.SIGKILL)  # the whole episode dies before its last node, as kill -9 does
(run_dir / "report.md").write_text("done")
'''
RESUME = '''run_dir = Path(args[args.index("--out") + 1] if "--out" in args else args[args.index("--resume") + 1])
if "--resume" in args and (run_dir / "killed").exists():
    (run_dir / "report.md").write_text("done")  # the loop resumes after its last checkpoint: the report was left
    (run_dir / "resumed").write_text("")
    sys.exit(0)
'''


def test_a_killed_compare_resumes_on_ray(ray_session, tmp_path):
    text = FAKE_RUN.replace('(run_dir / "report.md").write_text("done")\n', KILL_ONCE)
    text = text.replace('run_dir = Path(args[args.index("--out") + 1] if "--out" in args else '
                        'args[args.index("--resume") + 1])\n', RESUME)
    argv_for, out = _argv_for(_script(tmp_path / "fake_run.py", text)), tmp_path / "cmp"
    executor = RayExecutor(task_resources(RunConfig()))
    first = C.compare(out, ["good", "meh"], [0, 1, 2], argv_for=argv_for, executor=executor)
    assert [(f["policy"], f["seed"]) for f in first["failed"]] == [("meh", 2)]
    assert json.loads((out / "jobs" / "meh-s2.json").read_text())["rc"] == -9
    # (seeds 0..2: two paired seeds are left when one is killed; summarise needs two)
    # what a compare killed while meh-s2 ran leaves: no summary, no status of the running job
    for name in ("compare.json", "compare.md", "jobs/meh-s2.json"):
        (out / name).unlink()
    finished = ("good-s0", "good-s1", "good-s2", "meh-s0", "meh-s1")
    stamps = {n: (out / "episodes" / n / "report.md").stat().st_mtime_ns for n in finished}
    again = C.compare(out, ["good", "meh"], [0, 1, 2], argv_for=argv_for, executor=executor)
    assert again["failed"] == [] and (out / "episodes" / "meh-s2" / "resumed").exists()
    assert {n: (out / "episodes" / n / "report.md").stat().st_mtime_ns for n in stamps} == stamps
    status = json.loads((out / "jobs" / "meh-s2.json").read_text())
    assert status["status"] == "done" and "--resume" in status["argv"] and "--out" not in status["argv"]
    assert json.loads((out / "compare.json").read_text())["episodes"][0]["status"] == "done"
    assert again["policies"]["meh"]["endpoint_mean"] == pytest.approx(41.5)  # 40 + 1 + seed - 0.5
    assert again["pairs"]["good_vs_meh"]["endpoint"]["diffs"] == [3.0, 3.0, 3.0]


class CountingPorts(FakePorts):
    """FakePorts that append every training to a log file (a Ray worker's ports are its own copy,
    so counting in memory would count nothing); a control trains slowly, so two cells that
    need it at once overlap."""

    PLAN = FakePorts.PLAN | {"S02": (2.0, 0.0)}

    def __init__(self, log: str):
        super().__init__()
        self.log = log

    def train(self, card, parent_dir, fraction, seed, out_dir, snapshots=()):
        if card.id.startswith("CTRL"):
            time.sleep(0.3)
        run = super().train(card, parent_dir, fraction, seed, out_dir, snapshots)
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(f"{card.id} {fraction:.2f} {os.getpid()}\n")
        return run


def _table(root: Path, executor) -> Path:
    base, out = root / "base", root / "retro"
    base.mkdir(parents=True)
    (base / "scores.json").write_text(json.dumps({"target": 30.0, "prompt_strict": 70.0, "inst_strict": 80.0}))
    cards = [Card("S01", "finance", "sft"), Card("S02", "finance", "sft"), Card("G01", "sql", "grpo"),
             Card("BAD", "sql", "sft")]
    feats = {c.id: _features(c.id) for c in cards}
    R.freeze_features(out, [(c.id, feats[c.id]) for c in cards])
    res = R.run_table(out, cards, partial(CountingPorts, str(root / "trained.log")), str(base), [0], feats,
                      {c.id: content_hash(c.id) for c in cards}, controls=_controls(cards),
                      parent=bf.record().source.parent, executor=executor)
    assert res["cells_done"] == 3 and res["failed"] == {"BAD": "RuntimeError: trainer crashed"}
    return out


def test_run_table_on_ray_equals_local(ray_session, tmp_path):
    local = _table(tmp_path / "local", LocalExecutor())
    on_ray = _table(tmp_path / "ray", RayExecutor(R.cell_resources()))
    for name in ("cells.jsonl", "summary.json", "outcomes.jsonl"):
        assert (on_ray / name).read_text() == (local / name).read_text()
    s02 = json.loads((on_ray / "cells" / "S02" / "cell.json").read_text())
    assert s02["full"]["target"] == pytest.approx(1.0) and s02["outcome_class"] == "beneficial"  # 2 - 1 pp
    runs = [line.split() for line in (tmp_path / "ray" / "trained.log").read_text().splitlines()]
    # S01 and S02 ran in two workers at once, and still every control length trained once
    assert {pid for c, _, pid in runs if c == "S01"}.isdisjoint({pid for c, _, pid in runs if c == "S02"})
    controls = sorted((c, f) for c, f, _ in runs if c.startswith("CTRL"))
    assert controls == sorted({(c, f"{x:.2f}") for c in ("CTRL-grpo", "CTRL-sft") for x in (0.2, 1.0)})


def _env_and_dir() -> dict:
    return {"cwd": os.getcwd()} | {k: os.environ.get(k) for k in ("AGENT_NO_CACHE", "AGENT_RUN_CACHE",
                                                                  "AGENT_WORLD_NUMERICS", "CUDA_VISIBLE_DEVICES")}


def test_a_ray_task_gets_the_cache_switches_and_the_callers_directory(ray_session, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_RUN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("AGENT_WORLD_NUMERICS", "portable")  # the worker loads the caller's world
    monkeypatch.chdir(tmp_path)
    [seen] = RayExecutor(Resources(cpus=2, gpus=0)).run([Job(_env_and_dir)])
    assert seen.value == {"cwd": str(tmp_path), "AGENT_NO_CACHE": "1", "AGENT_RUN_CACHE": str(tmp_path / "cache"),
                          "AGENT_WORLD_NUMERICS": "portable", "CUDA_VISIBLE_DEVICES": ""}  # no GPU granted: none shown


def _fail() -> None:
    raise ValueError("this job fails")


def test_local_executor_reports_each_job_as_it_ends_and_returns_them_in_order():

    reported_second = threading.Event()
    seen: list[int] = []

    def on_done(i, outcome):
        seen.append(i)
        if i == 1:
            reported_second.set()

    # side by side: the first job ends only once the second has been reported, so a report made
    # only after every job (or in the jobs' order) would leave it waiting out its 10 s (False)
    outcomes = LocalExecutor(3).run([Job(reported_second.wait, (10.0,)), Job(int), Job(_fail)], on_done)
    assert sorted(seen) == [0, 1, 2] and seen.index(1) < seen.index(0)
    assert [(o.value, o.error) for o in outcomes] == [(True, None), (0, None), (None, "ValueError: this job fails")]
    seen.clear()
    outcomes = LocalExecutor(1).run([Job(_fail), Job(os.getpid)], on_done)
    assert seen == [0, 1] and outcomes[0].error == "ValueError: this job fails" and outcomes[1].value == os.getpid()


def test_ray_executor_reports_each_job_once(ray_session):
    seen: list[int] = []
    outcomes = RayExecutor(Resources(cpus=1, gpus=0)).run([Job(time.sleep, (0.2,)), Job(_fail), Job(os.getpid)],
                                                          lambda i, o: seen.append(i))
    assert sorted(seen) == [0, 1, 2]
    assert outcomes[1].error == "ValueError: this job fails" and isinstance(outcomes[2].value, int)


def test_progress_estimates_the_rest_at_the_pace_of_the_jobs_run_now(monkeypatch):
    left = Counter({"": 5})
    line = progress_line("cmp", "episodes", 3, 8, "bcit-s1", "done in 30.0 min", left=5,
                         eta_s=eta_s(5400.0, 2, left, {}))
    # 2 run in 1.5 h: 5 more at 0.75 h each
    assert line == "cmp: 3/8 episodes ended (bcit-s1: done in 30.0 min); 5 to run, about 3.8 h at the pace so far"
    assert progress_line("cmp", "episodes", 1, 8, "a-s0", "done", left=7, eta_s=eta_s(1.0, 0, Counter({"": 7}), {})) \
        == "cmp: 1/8 episodes ended (a-s0: done)"  # only a finished one so far: no pace, no estimate
    clock = iter([100.0 + 1800.0, 100.0 + 1800.0])  # both ended half an hour after the start
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    lines: list[str] = []
    p = Progress("retro", "cell seeds", 6, 2, lines.append, start=100.0)
    p.begin()
    p.end("S01 seed 0", "done", ran=True)
    p.end("S01 seed 1", "failed (RuntimeError: x)", ran=True)
    assert lines == ["retro: 6 cell seeds, 2 finished before, 4 to run",
                     "retro: 3/6 cell seeds ended (S01 seed 0: done); 3 to run, about 1.5 h at the pace so far",
                     "retro: 4/6 cell seeds ended (S01 seed 1: failed (RuntimeError: x)); 2 to run, about 0.5 h "
                     "at the pace so far"]


def test_each_policy_is_expected_to_take_its_own_pace(monkeypatch):
    """A comparison's seed starts with the policy that trains everything (2 h); the others take its
    runs from the cache (6 min): the rest is estimated per policy, not at one pace for all."""
    walls = {"validate_all": [7200.0], "bcit": [360.0]}
    # one validate_all and one bcit left, one job at a time (elapsed = the sum of the walls)
    assert eta_s(7560.0, 2, Counter({"validate_all": 1, "bcit": 1}), walls) == pytest.approx(7560.0)
    # a policy not run yet goes at the mean of those run; two jobs at once halve the wall-clock
    assert eta_s(3780.0, 2, Counter({"no_memory": 2}), walls) == pytest.approx(3780.0)
    clock = iter([7210.0, 7570.0, 14770.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    lines: list[str] = []
    names = ["validate_all-s0", "bcit-s0", "validate_all-s1", "bcit-s1"]
    p = Progress("cmp", "episodes", 4, 0, lines.append, names=names, group=C.policy_of, start=10.0)
    p.end("validate_all-s0", "done in 120.0 min", ran=True, wall_s=7200.0)
    p.end("bcit-s0", "done in 6.0 min", ran=True, wall_s=360.0)
    assert lines[-1].endswith("2 to run, about 2.1 h at the pace so far")  # one pace for all: 2 x 1.05 h, the same here
    p.end("validate_all-s1", "done in 120.0 min", ran=True, wall_s=7200.0)
    assert lines[-1].endswith("1 to run, about 0.1 h at the pace so far")  # bcit-s1: 6 min, not 1.4 h


def test_task_resources_follow_the_run_config():
    assert task_resources(RunConfig()) == Resources(cpus=2, gpus=0)
    assert task_resources(RunConfig(cost_mode="measured", devices=4, torch_threads=8)) == Resources(cpus=8, gpus=4)
    assert task_resources(RunConfig(backend="vllm")) == Resources(cpus=2, gpus=1)
    assert "CUDA_VISIBLE_DEVICES" not in task_env(Resources(cpus=1, gpus=1))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", [["compare", "--policies", "bcit,flat_additive", "--seeds", "1"],
                                     ["retrospective", "--execute", "--size", "test"]])
def test_an_unreachable_address_is_one_line_and_exit_2(command, tmp_path, capsys, monkeypatch):
    from agent.cli.main import main

    monkeypatch.delenv("AGENT_NO_CACHE")
    start = time.monotonic()
    rc = main(command + ["--out", str(tmp_path / "out"), "--executor", "ray", "--no-cache",
                         "--address", f"ray://127.0.0.1:{_closed_port()}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "cannot be reached" in err[0], err
    assert time.monotonic() - start < 20 and not (tmp_path / "out").exists()
    assert os.environ["AGENT_NO_CACHE"] == "1"  # --no-cache: for everything the command starts


def test_ray_missing_or_address_without_ray_is_exit_2(tmp_path, capsys, monkeypatch):
    from agent.cli.main import main

    argv = ["compare", "--policies", "bcit,flat_additive", "--seeds", "1", "--out", str(tmp_path / "out")]
    assert main(argv + ["--address", "ray://head:10001"]) == 2
    assert "--executor ray" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    assert main(argv + ["--executor", "ray"]) == 2
    assert "pip install" in capsys.readouterr().err and not (tmp_path / "out").exists()


SESSION = '''
import os, ray
from agent.experiments.executor import Job, Resources, session
from experience_bank.errors import BadInput
try:
    with session("ray", jobs=1, resources=Resources(cpus=1, gpus=1)):
        pass
except BadInput as exc:
    print("refused:", exc, ray.is_initialized())
with session("ray", jobs=2, resources=Resources(cpus=1)) as ex:
    pids = [o.value for o in ex.run([Job(os.getpid), Job(os.getpid)])]
    print("ran:", ray.cluster_resources()["CPU"], len(pids), os.getpid() not in pids)
print("ended:", ray.is_initialized())
'''


@pytest.mark.slow  # a second Ray instance: ~10 s more than the default run's ~40 s of Ray tests
def test_the_command_starts_and_ends_its_own_local_instance(tmp_path):
    """What `--executor ray` without --address does, in a process of its own (no session open)."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True, timeout=300, check=True,
                         cwd=tmp_path).stdout.splitlines()
    # no GPU on a CPU machine: refused before any job, the instance it started ended again
    assert out[0].startswith("refused: no node of the Ray cluster has 1 CPUs and 1 GPUs") and out[0].endswith("False")
    assert out[1:] == ["ran: 2.0 2 True", "ended: False"]  # --jobs 2 x 1 CPU; the jobs ran in workers
