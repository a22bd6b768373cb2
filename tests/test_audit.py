"""The decision ledger: written, verified hash for hash, tamper-evident, scored after freezing."""

import json

from support.bank_factory import record
from test_policies_compile import ctx

from agent.cli.main import main
from policies import EpisodeState, PolicyConfig, decide, next_state
from policies.audit import audit
from policies.decision_ledger import OutcomeCell, write_ledger_entry, write_outcome


def _run(tmp_path):
    cfg, state, hashes = PolicyConfig(), EpisodeState(), []
    recs = [record("S01", delta=12.0, grade="A", replicates=2), record("S02", delta=5.0), record("S03", delta=1.0)]
    for rec in recs:
        d = decide(rec, ctx(), "bcit", state, cfg)
        write_ledger_entry(tmp_path / "decisions.jsonl", episode_id="E1", decision=d, config=cfg, state=state,
                           record=rec, context=ctx())
        state = next_state(state, d)
        hashes.append(d)
    return hashes


def test_clean_ledger_verifies_and_scores(tmp_path):
    ds = _run(tmp_path)
    assert [d.action for d in ds] == ["train", "validate", "reject"]
    for d, cls, verdict in zip(ds, ("harmful", "beneficial", "neutral"), (None, "pass", None)):
        write_outcome(tmp_path / "outcomes.jsonl", OutcomeCell(candidate_id=d.candidate_id, decision_hash=d.decision_hash,
                      outcome=cls, trial_verdict=verdict, full_device_hours=2.0, trial_device_hours=0.4))
    rep = audit(tmp_path)
    assert rep["ok"] and rep["decisions"] == 3
    assert rep["policies"]["bcit"]["authorized"] == {"beneficial": 1, "harmful": 1, "neutral": 0}
    assert rep["policies"]["bcit"]["budget_spent_harmful"] == 2.0
    assert rep["counterfactual"][0]["applicability_only"] == "validate"
    assert rep["policies"]["applicability_only"]["undetermined"] == 2  # S01 and S03 never had a trial


def test_tampered_decision_fails(tmp_path, capsys):
    _run(tmp_path)
    path = tmp_path / "decisions.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[2]["decision"]["action"] = "train"  # edit the rejection after the fact
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rep = audit(path)
    assert not rep["ok"]
    assert any("decision_hash does not match" in p for p in rep["problems"])
    assert main(["audit", str(tmp_path), "--json"]) == 1


def test_broken_chain_fails(tmp_path):
    _run(tmp_path)
    path = tmp_path / "decisions.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[2]]) + "\n")
    # named by the file's line (1-based), as an editor shows it
    assert any(p.startswith("line 2: broken chain (prev_hash or seq does not follow line 1)")
               for p in audit(path)["problems"])


def test_an_outcomes_file_that_is_a_folder_is_refused_not_read_as_no_outcomes(tmp_path, capsys):
    _run(tmp_path)
    (tmp_path / "outcomes.jsonl").mkdir()
    assert main(["audit", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "outcomes.jsonl is not a file" in err and len(err.splitlines()) == 1


def test_a_damaged_outcome_line_is_named_by_its_file_and_line(tmp_path, capsys):
    ds = _run(tmp_path)
    good = OutcomeCell(candidate_id=ds[0].candidate_id, decision_hash=ds[0].decision_hash, outcome="harmful",
                       trial_verdict=None, full_device_hours=2.0, trial_device_hours=0.4)
    write_outcome(tmp_path / "outcomes.jsonl", good)
    with open(tmp_path / "outcomes.jsonl", "a") as f:
        f.write('{"candidate_id": "S02", "short": 1}\n')
    assert main(["audit", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"{tmp_path / 'outcomes.jsonl'} line 2: invalid outcome cell" in err
