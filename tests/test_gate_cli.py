"""`agent gate` / `agent profile` in-process, with the evaluator faked at its contract."""

from __future__ import annotations

import json
import shutil

import pytest
from test_gate_factory import SPECS, world

import evaluators
from agent.cli.main import main
from agent.cli.gate import family_targets

SCORES = {"initial": {}, "good": {"sql": 50.0}, "forgetful": {"sql": 50.0, "prompt": 57.5}}


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    from test_generate import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture()
def models(tmp_path, monkeypatch, tiny_folder):
    calls = []

    def fake_evaluate(model_dir, suites, split, *, out_dir, **kw):
        calls.append((model_dir.rsplit("/", 1)[-1], tuple(suites), split))
        name = model_dir.rsplit("/", 1)[-1]
        return {s: r for s, r in world(name, **SCORES[name]).items() if s in suites}

    monkeypatch.setattr(evaluators, "evaluate", fake_evaluate, raising=False)
    monkeypatch.setattr(evaluators, "metric_specs", lambda: SPECS, raising=False)
    for name in SCORES:  # real, loadable folders: the CLI checks them before evaluating anything
        shutil.copytree(tiny_folder, tmp_path / name)
    return tmp_path, calls


def test_profile_refuses_weights_that_do_not_fit_their_config(models, capsys):
    tmp, calls = models
    bad = tmp / "bad"
    shutil.copytree(tmp / "initial", bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(cfg | {"hidden_size": cfg["hidden_size"] * 2}))
    rc = main(["profile", "--base", str(tmp / "initial"), "--model", str(bad), "--out", str(tmp / "prof")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "different models" in err
    assert calls == [] and not (tmp / "prof").exists()


def run_gate(tmp, child, capsys, *extra):
    rc = main(["gate", "--initial", str(tmp / "initial"), "--parent", str(tmp / "initial"), "--child", str(tmp / child),
               "--target", "sql/target.exec_acc", "--family-target", "finance=finance/target.em",
               "--out", str(tmp / "evals"), "--json", *extra])
    return rc, capsys.readouterr()


def test_gate_cli_promotes_a_good_child(models, capsys):
    tmp, calls = models
    rc, out = run_gate(tmp, "good", capsys)
    verdict = json.loads(out.out)
    assert rc == 0 and verdict["promote"] and verdict["u_prom"] == pytest.approx(0.5)
    assert {c[2] for c in calls} == {"adoption"}  # never the validation split
    assert set(calls[0][1]) == {"ifeval", "captrack", "sql/target", "finance/target"}


def test_gate_cli_rejects_ifeval_loss_with_config(models, capsys, tmp_path):
    tmp, _ = models
    cfg = tmp_path / "run.yaml"
    cfg.write_text("gate_min_gain_pp: 5.0\ngate_kappa_pp: 20.0\n")
    rc, out = run_gate(tmp, "forgetful", capsys, "--config", str(cfg))
    verdict = json.loads(out.out)
    assert rc == 1 and verdict["decided_by"] == "ifeval_guard" and verdict["u_prom"] == pytest.approx(0.25)


def test_gate_cli_bad_input_is_one_line_exit_2(models, capsys):
    tmp, _ = models
    rc, out = run_gate(tmp, "missing", capsys)
    assert rc == 2 and "not found" in out.err and out.err.count("\n") == 1
    assert main(["gate", "--initial", "a", "--parent", "a", "--child", "a", "--target", "sql/target.exec_acc",
                 "--config", str(tmp / "nope.yaml")]) == 2


def test_family_targets_parsing():
    assert family_targets("sql/target.exec_acc", ["finance=finance/target.em"]) == {
        "sql": "sql/target.exec_acc", "finance": "finance/target.em"}
    from experience_bank.errors import BadInput
    with pytest.raises(BadInput):
        family_targets("sql/target.exec_acc", ["finance=sql/target.exec_acc"])


def test_profile_cli_prints_profile_retention_and_heatmap(models, capsys):
    tmp, _ = models
    png = tmp / "p.png"
    rc = main(["profile", "--base", str(tmp / "initial"), "--model", str(tmp / "forgetful"), "--out", str(tmp / "e"),
               "--heatmap", str(png), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and png.is_file() and json.loads(png.with_suffix(".json").read_text())["columns"] == ["forgetful"]
    assert [g["name"] for g in report["profile"]["groups"]] == ["CAN", "WILL", "HOW"]
    ifeval = next(t for t in report["retention"]["tasks"] if t["task"] == "ifeval")
    assert (ifeval["kept"], ifeval["lost"], ifeval["forgetting_pct"]) == (240, 0, 0.0)


def test_profile_cli_text_names_each_regime_and_why_it_was_capped(models, capsys):
    tmp, _ = models
    argv = ["profile", "--base", str(tmp / "initial"), "--model", str(tmp / "forgetful"), "--out", str(tmp / "e")]
    assert main(argv + ["--json"]) == 0
    profile = json.loads(capsys.readouterr().out)["profile"]
    caps = {c["name"]: c for c in profile["groups"] + profile["subs"]}
    assert main(argv) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if "drift" in line}
    assert set(lines) == set(caps)
    for name, c in caps.items():
        assert lines[name].endswith(str(c["severity"]) + (f" (capped from {c['raw_severity']}: {c['capped_by']})"
                                                          if c["capped_by"] else ""))
