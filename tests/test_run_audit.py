"""The run's audit writer: policies/decision_ledger.py's chained ledger and the one outcome-cell format,
written once per decision, read back by `agent audit` and `agent replay RUN_DIR`."""

from __future__ import annotations

import json

from support import bank_factory as bf
from agent.cli.main import main
from agent.run.audit import RunAudit, outcome_cell
from agent.run.rundir import RunDir
from experience_bank.records import CurrentContext
from policies import EpisodeState, decide
from policies.replay import replay_run
from support.graph_fakes import make_ctx


def _context() -> CurrentContext:
    src = bf.source()
    return CurrentContext(parent=src.parent, stage=0, families=("sql",), tasks={"sql": "sql/target"},
                          datasets=dict(src.datasets), runtimes=("trl-sft",), eval_protocol=src.eval_protocol,
                          output_protocols={"sql": "sql"})


def _manifest(tmp_path):
    ctx, _, bank = make_ctx(tmp_path / "m")
    bank.close()
    return ctx.manifest


def _ran(d, cid, gain, ifeval_p, verdict="pass", trial=2.0):
    return bf.event("E1", 0, cid).model_copy(update={
        "decision": d, "action": d.action, "outcome": "rolled_back", "reason": "gate: ifeval_guard",
        "trial_verdict": verdict, "trial_delta": trial, "target_metric": "sql/target.exec_acc", "target_gain": gain,
        "retention": {"prompt_strict": ifeval_p, "inst_strict": 0.0}, "full_run": "ran"})


def test_decisions_written_once_and_audit_passes(tmp_path, capsys):
    manifest = _manifest(tmp_path)
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    audit, ctx = RunAudit(rd, manifest), _context()
    for cid in ("S01", "S02"):
        rec = bf.record(cid, seed=cid)
        d = decide(rec, ctx, "bcit", EpisodeState(), manifest.policy.config)
        audit.decision(d, rec, ctx, EpisodeState())
        audit.decision(d, rec, ctx, EpisodeState())  # a re-run node writes nothing
        event = _ran(d, cid, -3.0, 0.0).model_copy(update={"action": d.action})
        audit.outcome(event, rec.card)
        audit.outcome(event, rec.card)
    assert len(rd.decisions_file.read_text().splitlines()) == 2
    assert len(rd.outcomes_file.read_text().splitlines()) == 2
    assert main(["audit", str(rd.path)]) == 0
    assert "its counterfactual walk equals the recorded decision on 2 of 2" in capsys.readouterr().out


def test_a_retention_violation_is_harmful_whatever_the_target_gained(tmp_path):
    # S02 of the default episode: +6.25 pp on its target, IFEval prompt strict -4.69 pp, rolled
    # back by the guard. The one outcome class (policies.outcomes) calls that harmful.
    manifest = _manifest(tmp_path)
    d = decide(bf.record("S02"), _context(), "bcit", EpisodeState(), manifest.policy.config)
    card = bf.record("S02").card
    harmful = outcome_cell(_ran(d, "S02", 6.25, -4.69), card, manifest)
    assert harmful.outcome == "harmful" and harmful.full == {"target": 6.25, "ifeval_p": -4.69, "ifeval_i": 0.0}
    assert outcome_cell(_ran(d, "S02", 6.25, -1.5), card, manifest).outcome == "beneficial"
    assert outcome_cell(_ran(d, "S02", 0.5, 0.0), card, manifest).outcome == "neutral"
    failed = _ran(d, "S02", 6.25, 0.0).model_copy(update={"gate_decided_by": "hard_failures"})
    assert outcome_cell(failed, card, manifest).outcome == "harmful"  # a hard failure is harmful, whatever it gained
    trial_only = bf.event("E1", 0, "S02").model_copy(update={"decision": d, "action": d.action, "outcome": "trial_failed",
                                                             "trial_verdict": "fail", "trial_delta": -4.0})
    cell = outcome_cell(trial_only, card, manifest)
    assert cell.outcome is None and cell.trial_verdict == "fail" and cell.short == {"0.20": -4.0}


def test_replay_of_a_run_reads_the_loops_cells(tmp_path):
    """`agent replay RUN_DIR` finds the loop's trial/full pairs (issue 12, defect 11)."""
    manifest = _manifest(tmp_path)
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    audit, ctx = RunAudit(rd, manifest), _context()
    for cid, gain, trial in (("S01", 5.0, 3.0), ("S02", -2.0, -1.0), ("S03", 1.5, 2.5)):
        rec = bf.record(cid, seed=cid)
        d = decide(rec, ctx, "validate_all", EpisodeState(), manifest.policy.config)
        audit.decision(d, rec, ctx, EpisodeState())
        audit.outcome(_ran(d, cid, gain, 0.0, trial=trial).model_copy(update={"action": d.action}), rec.card)
    rep = replay_run(rd.path)
    assert "shortfull" in rep and rep["shortfull"]["n"] == 3, rep["missing"]
    assert rep["retrospective"]["cells"] == 3 and rep["retrospective"]["positive"] == 2
    cells = [json.loads(x) for x in rd.outcomes_file.read_text().splitlines()]
    assert {c["family"] for c in cells} == {"sql"} and {c["method"] for c in cells} == {"sft"}


def test_audit_walks_successive_halving_over_the_recorded_trial_gains(tmp_path, capsys):
    """A successive_halving run's ledger and cells, read by `agent audit`: trial gains 2, 1, 3 pp, all
    Pass. By hand (eta = 5, top 1 of k <= 5): S01 continues (first), S02 does not (1 < 2), S03 does
    (3 is the best). validate_all, on the same cells, authorizes all three."""
    manifest = _manifest(tmp_path)
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    audit, ctx = RunAudit(rd, manifest), _context()
    runs = {"S01": (2.0, 5.0), "S02": (1.0, -5.0), "S03": (3.0, 0.0)}  # trial gain, full-run gain
    before = {"S01": (), "S02": (2.0,), "S03": (2.0, 1.0)}  # the episode state each decision is frozen with
    for cid, (trial, full) in runs.items():
        rec = bf.record(cid, seed=cid)
        state = EpisodeState(trial_gains=before[cid])
        d = decide(rec, ctx, "successive_halving", state, manifest.policy.config)
        assert d.action == "validate"
        audit.decision(d, rec, ctx, state)
        audit.outcome(_ran(d, cid, full, 0.0, trial=trial), rec.card)
    first = json.loads(rd.decisions_file.read_text().splitlines()[0])
    assert "trial_gains" not in first["inputs"]["state"]  # an empty state keeps the bytes of before the field
    assert main(["audit", "--json", str(rd.path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["own_policy"]["agree"] == 3
    assert report["policies"]["successive_halving"]["authorized"] == {"beneficial": 1, "harmful": 0, "neutral": 1}
    assert report["policies"]["validate_all"]["authorized"] == {"beneficial": 1, "harmful": 1, "neutral": 1}
