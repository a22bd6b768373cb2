"""Bounded trials: the verdict rule, never-promotable trial checkpoints, nu = continue
(trial + continuation = one uninterrupted run's steps), the floor of the 20% share, and a
charge of exactly the steps that ran."""

from __future__ import annotations

import pytest

from experience_bank.errors import BadInput
from test_train_world import build_parent, card, grpo_examples, has_three_reward, sft_examples
from trainers import checkpoint as ckpt
from trainers.ledger import CostModel, Ledger
from trainers.run import train
from trainers.steps import TrialRefused, trial_steps
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


@pytest.mark.parametrize("steps, most", [(32, 6), (8, 1), (20, 4), (120, 24), (39, 7)])
def test_a_trial_never_exceeds_its_share_of_the_nominal_steps(steps, most):
    assert trial_steps(card("grpo", steps=steps), 0.2) == most  # the ceiling ran 7 of 32 and 2 of 8
    assert most <= 0.2 * steps < most + 1  # the largest whole number of steps within 20%


def test_a_share_under_one_step_is_refused_with_its_reason():
    with pytest.raises(TrialRefused) as err:
        trial_steps(card("grpo", steps=4), 0.2)
    assert (err.value.card_id, err.value.nominal_steps, err.value.fraction) == ("T-grpo", 4, 0.2)
    assert "0.8 steps, under one" in err.value.reason and "at least 5 steps" in err.value.reason
    with pytest.raises(BadInput, match="trial fraction"):
        trial_steps(card("grpo", steps=40), 0.25)


def test_a_refused_trial_writes_nothing(tmp_path):
    parent = build_parent(tmp_path / "parent")
    with pytest.raises(TrialRefused):
        trial(card("grpo", steps=4), str(parent), grpo_examples(8), out_dir=str(tmp_path / "t"), run_key="t",
              measure=None, thresholds=T, reward_funcs={"numeric_match": has_three_reward})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parent"]


def test_a_grpo_trial_of_8_nominal_steps_runs_one_and_is_charged_one(tmp_path):
    parent = build_parent(tmp_path / "parent")
    c = card("grpo", steps=8, batch=8, num_generations=4)
    t = trial(c, str(parent), grpo_examples(32), out_dir=str(tmp_path / "t"), run_key="t",
              measure=lambda _: (0.0, {}, []), thresholds=T, reward_funcs={"numeric_match": has_three_reward})
    assert (t.train.steps, t.train.steps_run, t.train.nominal_steps) == (1, 1, 8)
    row = Ledger(":memory:").charge_run("E1", "trial:T", c, t.train, CostModel("nominal"))
    assert row["device_hours"] == pytest.approx(2.0 / 8)  # 12.5% of the card, what ran; not the 20% asked for


def test_continue_trial_plus_full_run_equals_an_uninterrupted_run(tmp_path):
    parent = build_parent(tmp_path / "parent")
    c, data = card("sft", steps=20, nu="continue"), sft_examples(64)
    seen = []

    def measure(child_dir):
        seen.append(child_dir)
        return 1.5, {"ifeval.prompt_strict": -0.5}, []

    t = trial(c, str(parent), data, out_dir=str(tmp_path / "trial"), run_key="t", measure=measure, thresholds=T)
    assert t.verdict == "pass" and t.train.never_promotable and t.train.steps == 4  # 0.2 * 20
    # the curve: 5 % and 10 % of 20 steps (steps 1 and 2) measured from their snapshots, then the trial's end
    snaps = [f"{t.train.checkpoint}/curve/step-{k}" for k in (1, 2)]
    assert seen == [*snaps, t.train.checkpoint]
    assert [(p.fraction, p.step) for p in t.curve] == [(0.05, 1), (0.10, 2), (0.2, 4)]
    assert [p.delta_val for p in t.curve] == [1.5, 1.5, 1.5] and set(t.curve[0].metrics) == {"train.loss", "train.grad_norm"}
    assert all(ckpt.weights_sha256(s) != t.train.checkpoint_sha256 for s in snaps)
    assert trial(c, str(parent), data, out_dir=str(tmp_path / "trial"), run_key="t", measure=None, thresholds=T) == t

    full = train(c, str(parent), data, out_dir=str(tmp_path / "full"), run_key="f", resume_from=t.train.checkpoint)
    once = train(c, str(parent), data, out_dir=str(tmp_path / "once"), run_key="o")
    assert full.steps == once.steps == 20 and not full.never_promotable
    assert full.log["continued_from_step"] == 4 and full.resumed_from == t.train.checkpoint
    assert (full.steps_run, full.nominal_steps, once.steps_run) == (16, 20, 20)
    # Trial and continuation are charged what each ran; together, the uninterrupted run's charge.
    ledger, cost = Ledger(":memory:"), CostModel("nominal")
    charged = [ledger.charge_run("E1", k, c, r, cost)["device_hours"] for k, r in (("trial", t.train), ("full", full))]
    assert charged == pytest.approx([0.4, 1.6]) and sum(charged) == pytest.approx(cost.run_charge(c, once))
    # the schedule is the full run's: the last learning rate of both runs is the same
    assert full.log["learning_rate"] == pytest.approx(once.log["learning_rate"])
    # saving the curve's snapshots left the training untouched: continued = uninterrupted, bit for bit
    assert full.checkpoint_sha256 == once.checkpoint_sha256


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


def test_a_lora_trials_snapshots_are_merged_models_between_parent_and_trial(tmp_path):
    """Each snapshot loads as a plain model (the adapter merged in a copy), differs from the parent
    and from the trial's end, and the trial's own child is what it would be without snapshots."""
    from transformers import AutoModelForCausalLM

    parent = build_parent(tmp_path / "parent")
    c, data = card("sft", steps=20, nu="restart", lora=True, lr=1e-2), sft_examples(64)
    t = trial(c, str(parent), data, out_dir=str(tmp_path / "t"), run_key="t", measure=lambda _: (0.0, {}, []),
              thresholds=T)
    plain = train(c, str(parent), data, out_dir=str(tmp_path / "plain"), run_key="p", fraction=0.2)
    assert [s.step for s in t.train.snapshots] == [1, 2] and plain.snapshots == ()
    assert t.train.checkpoint_sha256 == plain.checkpoint_sha256
    hashes = {ckpt.weights_sha256(f"{t.train.checkpoint}/{s.path}") for s in t.train.snapshots}
    assert len(hashes | {ckpt.weights_sha256(parent), t.train.checkpoint_sha256}) == 4
    snap = AutoModelForCausalLM.from_pretrained(f"{t.train.checkpoint}/{t.train.snapshots[0].path}", use_safetensors=True)
    assert not any("lora" in name for name, _ in snap.named_parameters())


@pytest.mark.parametrize(("steps", "fraction", "points"), [
    (120, 0.2, ((0.05, 6), (0.10, 12))),   # the default SFT card: 6 and 12 before the trial's 24
    (64, 0.2, ((0.05, 3), (0.10, 6))),     # GRPO 64 steps: 3, 6 before 12
    (10, 0.2, ((0.10, 1),)),               # 5 % is under one step; 10 % is step 1 of 2
    (5, 0.2, ()),                          # the trial is one step: no point before it
    (120, 0.1, ((0.05, 6),)),              # a 10 % trial has only the 5 % point before it
])
def test_curve_steps_are_the_floor_of_each_share_before_the_trials_end(steps, fraction, points):
    from trainers.steps import curve_steps

    assert curve_steps(card("sft", steps=steps), fraction) == points
