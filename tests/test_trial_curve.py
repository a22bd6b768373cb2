"""A trial records its curve (issue 27 item 1): measured at 5 % and 10 % of the nominal steps and
at its end, through the loop's own measurement, into the trial's result, the episode's event and
the bank's observation. The trainer is faked at its boundary (trainers.trial.train); the trial,
the measurement and the loop are the real ones."""

from __future__ import annotations

import pytest

from experience_bank.results import Snapshot, TrainResult
from support.graph_fakes import PLAN, FakePorts, _q, _write_model, make_ctx
from trainers import trial as trial_module


def fake_train(card, parent_dir, examples, *, out_dir, run_key, fraction, snapshots=(), **_):
    """A model of quality parent + the plan's gain x steps taken / full steps at the end and at each snapshot."""
    gain, last = PLAN[card.id][2], int(fraction * card.budget.steps)
    q = lambda step: _q(parent_dir) + gain * step / card.budget.steps  # noqa: E731
    saved = tuple(Snapshot(step=s, fraction=f, path=f"curve/step-{s}",
                           sha256=_write_model(f"{out_dir}/curve/step-{s}", q(s))) for f, s in snapshots)
    sha = _write_model(out_dir, q(last))
    return TrainResult(card_id=card.id, run_key=run_key, parent_sha256=sha, checkpoint=out_dir, checkpoint_sha256=sha,
                       steps=last, nominal_steps=card.budget.steps, fraction=fraction, wall_seconds=1.0,
                       never_promotable=True, snapshots=saved)


class CurvePorts(FakePorts):
    def evaluate(self, model_dir, split, out_dir):
        out = super().evaluate(model_dir, split, out_dir)  # IFEval at both strict levels, as the gate reads it
        ife = out["ifeval"]
        out["ifeval"] = ife.model_copy(update={"metrics": ife.metrics | {"inst_strict": ife.metrics["prompt_strict"]}})
        return out

    def trial(self, card, parent_dir, out_dir, run_key, measure):
        from agent.loop.ports import trial_thresholds

        return trial_module.trial(card, parent_dir, [{"row": 1}], out_dir=out_dir, run_key=run_key, measure=measure,
                                  thresholds=trial_thresholds(self.manifest), fraction=0.2)


def test_a_trials_curve_reaches_its_result_event_and_ledger(tmp_path, monkeypatch):
    from agent.loop.episode import drive

    monkeypatch.setattr(trial_module, "train", fake_train)
    ports = CurvePorts(tmp_path)
    ctx, initial, bank = make_ctx(tmp_path, ports=ports)
    ports.manifest = ctx.manifest
    try:
        drive(ctx, initial, tmp_path / "checkpoints.sqlite")
        events = {e.candidate_id: e for e in bank.events("E-fake")}
    finally:
        bank.close()
    event = events["S02"]
    trial = ctx.rundir.trial(event.decision.decision_hash)
    # the library's cards have 100 nominal steps: snapshots at 5 and 10, the trial ends at 20
    assert [(p.fraction, p.step) for p in trial.curve] == [(0.05, 5), (0.10, 10), (0.2, 20)]
    # S02 gains 5 pp over its 100 steps: 0.25, 0.5 and 1.0 pp at steps 5, 10 and 20
    assert [p.delta_val for p in trial.curve] == pytest.approx([0.25, 0.5, 1.0])
    assert trial.curve[-1].delta_val == trial.delta_val and trial.verdict == "pass"
    assert trial.curve[0].metrics["sql/target.exec_acc"] == pytest.approx(40.25)
    assert event.trial_curve == {"0.05": pytest.approx({"target": 0.25, "ifeval.prompt_strict": 0.0,
                                                        "ifeval.inst_strict": 0.0}),
                                 "0.10": pytest.approx({"target": 0.5, "ifeval.prompt_strict": 0.0,
                                                        "ifeval.inst_strict": 0.0}),
                                 "0.20": pytest.approx({"target": 1.0, "ifeval.prompt_strict": 0.0,
                                                        "ifeval.inst_strict": 0.0})}
    # every model of the curve was evaluated and charged to the trial
    assert event.trial_device_hours > 0
    snaps = [f"eval:{s.sha256}:validation" for s in trial.train.snapshots]
    assert all(ctx.ledger.get("E-fake", k) is not None for k in snaps)


def test_an_event_or_record_without_a_curve_keeps_its_bytes():
    from experience_bank.hashing import canonical_json
    from support import bank_factory as bf

    record = bf.record("S01", delta=1.0)
    assert "trial_curve" not in canonical_json(record)
    curved = record.model_copy(update={"evidence": record.evidence.model_copy(
        update={"trial_curve": {"0.05": {"target": 1.0}}})})
    assert '"trial_curve":{"0.05":{"target":1.0}}' in canonical_json(curved)
