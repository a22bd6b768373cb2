"""Bounded trials: the verdict rule, never-promotable trial checkpoints, and nu = continue
(trial + continuation = one uninterrupted run's steps)."""

from __future__ import annotations

import pytest

from experience_bank.errors import BadInput
from test_train_world import build_parent, card, sft_examples
from trainers.run import train
from trainers.trial import TrialThresholds, trial, verdict

T = TrialThresholds(min_gain_pp=1.0, fail_drop_pp=2.0, retention_drop_pp=2.0)


@pytest.mark.parametrize("delta, retention, hard, expected", [
    (1.5, {"ifeval.prompt_strict": -1.9}, [], "pass"),
    (0.5, {}, [], "inconclusive"),
    (-2.0, {}, [], "fail"),
    (5.0, {"ifeval.prompt_strict": -2.1}, [], "fail"),   # no target gain compensates for retention
    (5.0, {}, ["unparseable output 40%"], "fail"),
])
def test_verdict_rule(delta, retention, hard, expected):
    label, reasons = verdict(delta, retention, hard, T)
    assert label == expected and reasons


def test_thresholds_are_checked():
    with pytest.raises(BadInput):
        TrialThresholds(min_gain_pp=1.0, fail_drop_pp=-2.0, retention_drop_pp=2.0)


def test_continue_trial_plus_full_run_equals_an_uninterrupted_run(tmp_path):
    parent = build_parent(tmp_path / "parent")
    c, data = card("sft", steps=20, nu="continue"), sft_examples(64)
    seen = []

    def measure(child_dir):
        seen.append(child_dir)
        return 1.5, {"ifeval.prompt_strict": -0.5}, []

    t = trial(c, str(parent), data, out_dir=str(tmp_path / "trial"), run_key="t", measure=measure, thresholds=T)
    assert t.verdict == "pass" and t.train.never_promotable and t.train.steps == 4  # ceil(0.2 * 20)
    assert seen == [t.train.checkpoint]
    assert trial(c, str(parent), data, out_dir=str(tmp_path / "trial"), run_key="t", measure=None, thresholds=T) == t

    full = train(c, str(parent), data, out_dir=str(tmp_path / "full"), run_key="f", resume_from=t.train.checkpoint)
    once = train(c, str(parent), data, out_dir=str(tmp_path / "once"), run_key="o")
    assert full.steps == once.steps == 20 and not full.never_promotable
    assert full.log["continued_from_step"] == 4 and full.resumed_from == t.train.checkpoint
    # the schedule is the full run's: the last learning rate of both runs is the same
    assert full.log["learning_rate"] == pytest.approx(once.log["learning_rate"])


def test_a_restart_trial_cannot_be_continued_and_nu_none_has_no_trial(tmp_path):
    parent = build_parent(tmp_path / "parent")
    c = card("sft", steps=10, nu="restart")
    t = train(c, str(parent), sft_examples(16), out_dir=str(tmp_path / "t"), run_key="t", fraction=0.2)
    assert t.steps == 2 and t.never_promotable
    with pytest.raises(BadInput, match="restart from the parent"):
        train(c, str(parent), sft_examples(16), out_dir=str(tmp_path / "f"), run_key="f", resume_from=t.checkpoint)
    with pytest.raises(BadInput, match="nu = none"):
        trial(card("sft", nu="none"), str(parent), sft_examples(8), out_dir=str(tmp_path / "n"), run_key="n",
              measure=None, thresholds=T)
    with pytest.raises(BadInput, match="trial fraction"):
        trial(c, str(parent), sft_examples(8), out_dir=str(tmp_path / "n"), run_key="n", measure=None,
              thresholds=T, fraction=0.5)
