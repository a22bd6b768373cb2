"""bench/grpo_signal.py: a GRPO run's reward and signal from TRL's log history, by hand."""

import json

import pytest

from bench.grpo_signal import main, runs, signal, table


def _history(rewards, zero_std):
    return [{"step": i + 1, "reward": r, "frac_reward_zero_std": z, "rewards/execution/mean": r}
            for i, (r, z) in enumerate(zip(rewards, zero_std))] + [{"train_runtime": 1.0}]


def test_signal_reads_reward_and_groups_without_signal():
    s = signal(_history([0.0, 0.3, 0.3, 0.6, 0.6, 0.9], [1.0, 0.5, 0.5, 0.5, 0.5, 0.0]))
    # thirds of 6 logged steps: first (0.0, 0.3) -> 0.15, last (0.6, 0.9) -> 0.75; no signal 3.0 / 6 = 0.5
    assert s == pytest.approx({"steps": 6, "reward": 0.45, "no_signal": 0.5, "reward_first": 0.15, "reward_last": 0.75})
    assert signal([{"loss": 1.0, "step": 1}]) is None  # an SFT run logs no reward


def test_runs_and_table_read_the_cache_layout(tmp_path, capsys):
    for key, card, rewards in (("aa1", "G05", [0.2, 0.4, 0.6]), ("aa2", "G05", [0.4, 0.4, 0.4]), ("bb1", "S01", None)):
        files = tmp_path / "runs" / "entries" / "train" / key[:2] / key / "files"
        (files / "trainer_state").mkdir(parents=True)
        (files / "result.json").write_text(json.dumps({"card_id": card}))
        history = _history(rewards, [0.25] * 3) if rewards else [{"loss": 1.0, "step": 1}]
        (files / "trainer_state" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    rows = table(runs(tmp_path))
    assert len(rows) == 1 and rows[0]["card"] == "G05" and rows[0]["rewards"] == "execution" and rows[0]["runs"] == 2
    assert rows[0]["reward"] == pytest.approx(0.4) and rows[0]["reward_last"] == pytest.approx(0.5)
    assert main(["--cache", str(tmp_path)]) == 0 and "| G05 | execution | 2 |" in capsys.readouterr().out
    assert main(["--cache", str(tmp_path / "none")]) == 2 and "holds no run cache" in capsys.readouterr().err


def test_a_grpo_runs_result_says_whether_its_reward_rose():
    from trainers.run import reward_signal as _grpo_signal

    steps = [{"step": i + 1, "reward": 0.2 * i, "frac_reward_zero_std": 0.5 if i < 4 else 0.25} for i in range(8)]
    # quarters of 8 logged steps: (0, 0.2) -> 0.1 and (1.2, 1.4) -> 1.3; no signal (4 x 0.5 + 4 x 0.25) / 8
    assert _grpo_signal(steps) == pytest.approx({"reward_early": 0.1, "reward_late": 1.3, "no_signal": 0.375})
    assert _grpo_signal([{"step": 1, "loss": 1.0}]) == {}
