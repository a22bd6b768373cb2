"""A trial's verdict stays one run's, but its record and the report carry the paired SE of its deltas (issue 26 item 2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from support import bank_factory as bf
from support.graph_fakes import FakePorts, _q, make_ctx
from experience_bank.hashing import content_hash
from experience_bank.results import EvalIdentity, ItemResult, SuiteResult, TrainResult, TrialResult
from trainers.trial import TrialThresholds, verdict

N = 100


def _suite(name: str, correct: set[int], sha: str, split: str) -> SuiteResult:
    ident = EvalIdentity(suite=name, split=split, data_sha256=bf.sha((name, split)), scorer_version="fake-1",
                         model_sha256=sha, chat_template_sha256=bf.sha("tpl"), backend="transformers",
                         batch_size=1, max_new_tokens=8, seed=0)
    items = tuple(ItemResult(item_id=f"i{i}", correct=i in correct) for i in range(N))
    acc = 100.0 * len(correct) / N
    metrics = {"exec_acc": acc} if name == "sql/target" else {"prompt_strict": acc, "inst_strict": acc}
    return SuiteResult(identity=ident, generations_sha256=bf.sha((sha, name, split)), metrics=metrics, items=items,
                       n_unparseable=0, n_unknown=0)


class ItemPorts(FakePorts):
    """Models scored item by item: a model of quality q gets target items 0..q-1 right; every model gets
    IFEval prompts 0..59 right except a trial checkpoint, which loses prompt 0 and gains prompt 60.
    Its trial calls the loop's real measurement, as trainers.trial does."""

    def evaluate(self, model_dir, split, out_dir):
        q, sha = _q(model_dir), self.model_sha(model_dir)
        ife = set(range(1, 61)) if Path(model_dir).name == "trial" else set(range(60))
        return {"sql/target": _suite("sql/target", set(range(round(q))), sha, split),
                "ifeval": _suite("ifeval", ife, sha, split)}

    def trial(self, card, parent_dir, out_dir, run_key, measure):
        run = self._train(card, parent_dir, out_dir, run_key, 1.0, "trial")
        delta, ret, hard, _ = measure(run.checkpoint)
        label, reasons = verdict(delta, ret, hard, TrialThresholds(min_gain_pp=1.0, fail_drop_pp=2.0, retention_drop_pp=2.0))
        return TrialResult(verdict=label, delta_val=delta, retention_deltas=ret, reasons=reasons, train=run)


def test_the_trial_record_and_the_report_carry_the_paired_se(tmp_path):
    from agent.loop.episode import drive

    ctx, initial, bank = make_ctx(tmp_path, ports=ItemPorts(tmp_path))
    try:
        drive(ctx, initial, tmp_path / "checkpoints.sqlite")
        events = {e.candidate_id: e for e in bank.events("E-fake")}
    finally:
        bank.close()
    trial = ctx.rundir.trial(events["S02"].decision.decision_hash)
    # by hand, ddof 0 over 100 pairs: the target gains item 40 (one +1): sqrt(0.01 * 0.99 / 100);
    # IFEval loses prompt 0 and gains prompt 60 against the initial parent: sqrt(0.02 / 100)
    assert trial.verdict == "pass" and trial.delta_val == pytest.approx(1.0)
    assert trial.paired_se_pp["target"] == pytest.approx(100 * math.sqrt(0.01 * 0.99 / N))
    assert trial.paired_se_pp["ifeval"] == pytest.approx(100 * math.sqrt(0.02 / N))
    report = (tmp_path / "report.md").read_text()
    assert "| S02 | pass | 1.00 | 0.995 | 0 | 0 | 1.41 |" in report


def test_a_trial_record_without_the_field_still_loads():
    run = TrainResult(card_id="S02", run_key="k", parent_sha256=content_hash("p"), checkpoint="x",
                      checkpoint_sha256=content_hash("c"), steps=1, fraction=0.2, wall_seconds=1.0, never_promotable=True)
    old = TrialResult(verdict="pass", delta_val=1.0, retention_deltas={}, reasons=(), train=run).model_dump(mode="json")
    old.pop("paired_se_pp")
    assert TrialResult.model_validate_json(json.dumps(old)).paired_se_pp == {}
