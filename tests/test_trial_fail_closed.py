"""A trial fails closed: UNKNOWN metrics, missing suites and unparseable output are a Fail with
its reason, never a Pass and never an aborted episode (docs/AUTHORIZER.md §5)."""

from __future__ import annotations

from pathlib import Path

from test_gate_factory import suite
from support.graph_fakes import FakePorts, make_ctx
from trainers.trial import TrialThresholds, measurement, verdict

T = TrialThresholds(min_gain_pp=1.0, fail_drop_pp=2.0, retention_drop_pp=2.0)
RET = ("ifeval.prompt_strict", "ifeval.inst_strict")


def _res(model, sql=40.0, prompt=60.0, unparseable=0, split="validation"):
    return {"sql/target": suite("sql/target", {"exec_acc": sql}, [True] * 4 + [False] * 6, model=model,
                                n_unparseable=unparseable, split=split),
            "ifeval": suite("ifeval", {"prompt_strict": prompt, "inst_strict": 70.0}, [True] * 10, model=model,
                            split=split)}


def _judge(child):
    delta, ret, hard = measurement(child, _res("parent"), _res("initial"), target="sql/target.exec_acc",
                                   retention=RET, max_unparseable_share=0.2)
    return verdict(delta, ret, hard, T), delta, hard


def test_a_clean_gain_passes_and_each_failure_fails():
    (label, _), delta, _ = _judge(_res("child", sql=45.0))
    assert label == "pass" and delta == 5.0
    (label, reasons), _, hard = _judge(_res("child", sql=None))
    assert label == "fail" and any("UNKNOWN" in r for r in reasons)
    (label, reasons), _, _ = _judge(_res("child", sql=45.0, unparseable=5))  # 50% > 20%
    assert label == "fail" and any("unparseable" in r for r in reasons)
    child = _res("child", sql=45.0)
    del child["ifeval"]
    (label, reasons), _, _ = _judge(child)
    assert label == "fail" and any("no ifeval results" in r for r in reasons)


class MeasuringPorts(FakePorts):
    """A fake trainer whose trial calls the loop's real measurement on an UNKNOWN evaluation."""

    def trial(self, card, parent_dir, out_dir, run_key, measure):
        from experience_bank.results import TrialResult

        run = self._train(card, parent_dir, out_dir, run_key, 0.0, "trial")
        delta, ret, hard, _ = measure(run.checkpoint)
        label, reasons = verdict(delta, ret, hard, T)
        return TrialResult(verdict=label, delta_val=delta, retention_deltas=ret, reasons=reasons, train=run)

    def evaluate(self, model_dir, split, out_dir):
        out = super().evaluate(model_dir, split, out_dir)
        if Path(model_dir).name == "trial":  # the trial checkpoint's evaluator errs
            out["sql/target"] = out["sql/target"].model_copy(update={"metrics": {"exec_acc": None}})
        return out


def test_an_unknown_trial_metric_is_recorded_as_fail_and_the_episode_goes_on(tmp_path):
    from agent.loop.episode import drive

    ctx, initial, bank = make_ctx(tmp_path, ports=MeasuringPorts(tmp_path))
    try:
        final = drive(ctx, initial, tmp_path / "checkpoints.sqlite")
        events = {e.candidate_id: e for e in bank.events("E-fake")}
    finally:
        bank.close()
    assert final["stop_reason"] == "candidates_exhausted"
    s02 = events["S02"]  # planned to pass; its evaluation is UNKNOWN
    assert s02.outcome == "trial_failed" and s02.trial_verdict == "fail" and "UNKNOWN" in s02.reason
    assert events["S06"].outcome == "promoted"  # later candidates were still decided and run
