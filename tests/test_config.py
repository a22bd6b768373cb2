"""RunConfig: defaults < YAML < flags; unknown keys, duplicates, bad values are one-line BadInput."""

from __future__ import annotations

import pytest

from agent.config import build_config
from experience_bank.errors import BadInput


def test_precedence(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("seed: 3\npolicy: validate_all\n")
    cfg = build_config(str(f), {"seed": 7, "policy": None})
    assert (cfg.seed, cfg.policy, cfg.episode_budget) == (7, "validate_all", "36gpuh")


@pytest.mark.parametrize("text, needle", [
    ("sede: 3\n", "unknown config key 'sede'"),
    ("seed: 1\nseed: 2\n", "duplicate key 'seed'"),
    ("seed: [1\n", "not valid YAML"),
    ("seed: '3'\n", "invalid config value for seed"),
    ("trial_fraction: 0.5\n", "invalid config value for trial_fraction"),
    ("- 1\n", "must be a mapping"),
    ("tau_l: .nan\n", "invalid config value for tau_l"),
    ("1: 2\n", "config key 1 at line 1 is not a string"),
    ("seed: 1\nnull: x\n", "config key None at line 2 is not a string"),
    ("seed: 1" + "0" * 400 + "\n", "invalid config value for seed"),
    ("seed: " + "9" * 5000 + "\n", "holds a value that cannot be read"),
    ("seed: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than a config can"),
])
def test_bad_config_files(tmp_path, text, needle):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(BadInput, match=needle):
        build_config(str(f))


def test_a_config_that_is_not_utf8_names_the_file_and_line(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_bytes(b"seed: 1\npolicy: caf\xe9\n")
    with pytest.raises(BadInput, match=r"c.yaml line 2 is not UTF-8 .*save the file as UTF-8"):
        build_config(str(f))


def test_shipped_configs_parse():
    for name in ("default", "test", "qwen3-4b"):
        build_config(f"runs/{name}.yaml")


def test_frozen():
    cfg = build_config(None)
    with pytest.raises(Exception):
        cfg.seed = 3
