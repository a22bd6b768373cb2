"""CLI conventions: `agent --version`, an example in every command's --help, and `agent runs ls`
telling running, finished and killed (resumable) episodes apart, with policy, spend and promotions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.main import build_parser, commands, main

SHA = {"a": "a" * 64, "b": "b" * 64, "c": "c" * 64}


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"agent {version('posttrain-agent')}"


def test_every_command_help_has_an_example():
    leaves = list(commands(build_parser()))
    assert len(leaves) >= 19 and ("runs", "ls") in [p for p, _ in leaves]
    missing = [" ".join(p) for p, cmd in leaves if "example" not in cmd.format_help().lower()]
    assert missing == []
    for path, cmd in leaves:  # each example names its own command
        help_text = cmd.format_help()
        assert f"agent {' '.join(path)}" in help_text[help_text.lower().index("example"):], path


def _episode(folder: Path, name: str, *, policy: str, charges: list[float], promote: bool, report: bool) -> Path:
    """A run directory as the loop leaves it: manifest, parent pointer, ledger (real writers)."""
    from agent.run.promotion import init_parent, promote as move
    from experience_bank.results import GateVerdict
    from trainers.ledger import Ledger

    from agent.config import RunConfig
    from agent.run.manifest import Evaluators, ModelAt, WorldId, build_manifest
    from agent.run.rundir import RunDir

    run = folder / name
    run.mkdir(parents=True)
    RunDir(run).freeze(build_manifest(
        episode_id=name, config=RunConfig(policy=policy, world="test"), budget_h=36.0,
        initial=ModelAt(dir="base", sha256=SHA["a"]), world=WorldId(size="test", recipe_sha256=SHA["c"],
                                                                    chat_template_sha256=SHA["c"]),
        library_version=1, candidate_hashes=[], evaluators=Evaluators(
            suites=("sql/target",), eval_protocol="p", backend="transformers", n=1, batch_size=1, seed=0),
        datasets={}, allowlist={}))
    init_parent(run, "base", SHA["a"])
    if promote:
        move(run, "child", GateVerdict(promote=True, decided_by="all_passed", checks=(), u_prom=0.1,
                                       child_sha256=SHA["b"], parent_sha256=SHA["a"], initial_sha256=SHA["a"]))
    ledger = Ledger(str(run / "ledger.sqlite"))
    for i, h in enumerate(charges):
        ledger.charge(name, f"k{i}", kind="train", device_hours=h, wall_seconds=1.0)
    if report:
        (run / "report.md").write_text("# done\n")
    return run


HOLD = "import sys, time; from pathlib import Path; from agent.run.runlock import hold\n" \
       "with hold(Path(sys.argv[1])):\n    print('held', flush=True); sys.stdin.readline()"


def test_runs_ls_states_spend_and_promotions(tmp_path, capsys):
    done = _episode(tmp_path, "ep-1", policy="bcit", charges=[1.5, 2.25], promote=True, report=True)
    live = _episode(tmp_path, "ep-2", policy="flat_additive", charges=[0.5], promote=False, report=False)
    dead = _episode(tmp_path, "ep-3", policy="bcit", charges=[], promote=False, report=False)
    (tmp_path / "not-a-run").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(live)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["runs", "ls", "--runs", str(tmp_path), "--json"]) == 0
        rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
        assert set(rows) == {"ep-1", "ep-2", "ep-3"}
        assert [rows[k]["state"] for k in ("ep-1", "ep-2", "ep-3")] == ["finished", "running", "killed"]
        assert rows["ep-1"]["spent_h"] == 3.75 and rows["ep-1"]["promotions"] == 1 and rows["ep-1"]["budget_h"] == 36.0
        assert rows["ep-2"]["policy"] == "flat_additive" and rows["ep-3"]["resume"] == f"agent run --resume {dead}"
    finally:
        holder.kill()  # SIGKILL: the kernel drops the lock with the process
        holder.wait()
    assert holder.returncode == -signal.SIGKILL
    assert main(["runs", "ls", "--runs", str(tmp_path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["episode", "state", "policy"]
    assert [line.split()[1] for line in table[1:]] == ["finished", "killed", "killed"]
    assert "3.75 / 36" in table[1] and table[2].endswith(f"resume: agent run --resume {live}")
    assert done.name in table[1]


def test_a_copied_run_is_listed_as_a_copy_without_a_resume(tmp_path, capsys):
    import shutil
    original = _episode(tmp_path, "ep-1", policy="bcit", charges=[0.5], promote=False, report=False)
    shutil.copytree(original, tmp_path / "ep-1-copy")
    assert main(["runs", "ls", "--runs", str(tmp_path), "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["ep-1"]["copy_of"] is None and rows["ep-1"]["resume"] == f"agent run --resume {original}"
    assert rows["ep-1-copy"]["copy_of"] == "ep-1" and rows["ep-1-copy"]["resume"] is None
    assert rows["ep-1-copy"]["state"] == "killed" and rows["ep-1-copy"]["spent_h"] == 0.5
    assert main(["runs", "ls", "--runs", str(tmp_path)]) == 0
    (copy_line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ep-1-copy")]
    assert copy_line.endswith("a copy of episode ep-1 (not resumable under this name)")


def test_a_damaged_run_is_listed_as_unreadable_beside_the_others(tmp_path, capsys):
    _episode(tmp_path, "ep-1", policy="bcit", charges=[1.0], promote=False, report=True)
    bad = _episode(tmp_path, "ep-2", policy="bcit", charges=[], promote=False, report=False)
    (bad / "parent.json").write_text("{not json")
    edited = _episode(tmp_path, "ep-3", policy="bcit", charges=[], promote=False, report=False)
    manifest = json.loads((edited / "manifest.json").read_text())
    (edited / "manifest.json").write_text(json.dumps(manifest | {"budget_device_hours": 99.0}))
    assert main(["runs", "ls", "--runs", str(tmp_path), "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["ep-1"]["state"] == "finished" and rows["ep-2"]["state"] == "unreadable"
    assert "not valid JSON" in rows["ep-2"]["error"]
    assert rows["ep-3"]["state"] == "unreadable" and "manifest_hash" in rows["ep-3"]["error"]  # an edited manifest


def test_a_second_process_cannot_run_a_held_episode(tmp_path):
    from agent.run.runlock import hold, running
    from experience_bank.errors import BadInput

    assert not running(tmp_path)
    with hold(tmp_path):
        assert running(tmp_path)
        with pytest.raises(BadInput, match="another live process"):
            with hold(tmp_path):
                pass
    assert not running(tmp_path)


def test_runs_ls_of_a_missing_folder_is_bad_input(tmp_path, capsys):
    assert main(["runs", "ls", "--runs", str(tmp_path / "nope")]) == 2
    assert "runs folder" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["gonogo", "X", "--alpha", "abc"], "agent: error: gonogo: argument --alpha: invalid float value: 'abc' "
                                        "(see `agent gonogo --help`)"),
    (["bank", "init", "--wait", "nan"], "agent: error: bank init: argument --wait: 'nan' is not a number"),
    ([], "agent: error: the following arguments are required: COMMAND (see `agent --help`)"),
    (["nosuch"], "agent: error: argument COMMAND: invalid choice: 'nosuch'"),
])
def test_a_flag_argparse_refuses_is_one_line_too(capsys, argv, said):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(said) and len(err.splitlines()) == 1
