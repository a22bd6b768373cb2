"""`agent compare --fit-from`: each world's learned models fitted on the other worlds only
(agent/experiments/fitted.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.experiments import compare as C
from agent.experiments.extrapolation import load_runs
from agent.experiments.fitted import Fitted, fit_for_world, fitted_summary, held_out_sources
from experience_bank.errors import BadInput
from policies import extrapolate, gonogo, gonogo_features

V3 = Path(__file__).resolve().parents[1] / "docs" / "results" / "retrospective-default.json"


def _sources(root: Path, worlds=(0, 1, 2)) -> list[Path]:
    """One executed-retrospective layout per world seed, each holding v3's 24 published cells."""
    cells = json.loads(V3.read_text())["cells"]
    out = []
    for w in worlds:
        d = root / f"w{w}"
        for c in cells:
            (d / "cells" / c["id"] / "s0").mkdir(parents=True)
            (d / "cells" / c["id"] / "s0" / "cell.json").write_text(json.dumps(c))
        (d / "ledger.json").write_text(json.dumps({"world_seed": w, "catalogue_sha256": "v3"}))
        out.append(d)
    return out


def test_a_worlds_models_are_fitted_on_the_other_worlds_only_and_once(tmp_path):
    sources = _sources(tmp_path)
    out = tmp_path / "cmp" / "world-1"
    fitted = fit_for_world(out, 1, sources, gonogo=True, alpha=0.2, delta=0.2)
    others = [sources[0], sources[2]]
    assert fitted.extrapolation.read_text() == extrapolate.dumps(extrapolate.fit(load_runs(others)))
    model = gonogo.loads(fitted.gonogo.read_text())
    assert model.n_train == 48 and model.alpha == 0.2  # two worlds of 24 runs; none of world 1's
    summary = fitted_summary(out)
    assert summary["source_world_seeds"] == [0, 2] and summary["gonogo_n_train"] == 48
    # once per comparison directory: a resumed comparison keeps the bytes its episodes froze
    before = fitted.gonogo.read_bytes()
    again = fit_for_world(out, 1, sources[:1] + sources[2:] + [sources[1]], gonogo=True, alpha=0.3)
    assert again == fitted and again.gonogo.read_bytes() == before


def test_the_go_no_go_goes_to_bcit_predictive_and_the_extrapolation_to_every_policy(tmp_path):
    f = Fitted(gonogo=tmp_path / "g.json", extrapolation=tmp_path / "x.json")
    assert f.flags("bcit_predictive") == ["--gonogo-model", str(tmp_path / "g.json"),
                                          "--extrapolation-model", str(tmp_path / "x.json")]
    assert f.flags("bcit") == ["--extrapolation-model", str(tmp_path / "x.json")]
    argv = C.episode_argv(tmp_path, "bcit", 0, budget=None, config=None, world_seed=2, extra=f.flags("bcit"))
    assert argv[-4:-2] == ["--extrapolation-model", str(tmp_path / "x.json")]


def test_a_world_with_no_other_source_is_bad_input(tmp_path):
    sources = _sources(tmp_path, worlds=(0,))
    assert held_out_sources(sources, 5) == sources  # a held-out world: fitted on every source
    with pytest.raises(BadInput, match="every source is of world seed 0"):
        held_out_sources(sources, 0)
    with pytest.raises(BadInput, match="no ledger.json"):
        held_out_sources([tmp_path], 0)


def test_the_cli_refuses_before_any_episode_in_one_line(tmp_path, capsys):
    sources = _sources(tmp_path, worlds=(0,))
    out = tmp_path / "cmp"
    # the config's world is world seed 0, and the only source is of world 0
    code = main(["compare", "--policies", "bcit,validate_all", "--fit-from", str(sources[0]), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "every source is of world seed 0" in err
    assert not out.exists()


def test_a_source_s_cards_are_its_world_seed_s_without_building_its_world(tmp_path, monkeypatch):
    """A source measured where the world was built with other numerics (another world id, another
    base) reads its cards here without building anything: steps and datasets are the size's and
    seed's; an unknown size is refused in one line."""
    from agent.world.catalogue import STEP_SCALE, catalogue, catalogue_sha256  # noqa: PLC0415
    from agent.world.store import CardWorld  # noqa: PLC0415
    from agent.experiments.fitted import _cards  # noqa: PLC0415
    from evaluators import tasks  # noqa: PLC0415

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "empty-cache"))
    src = _sources(tmp_path, worlds=(7,))[0]
    (src / "ledger.json").write_text(json.dumps({"world_seed": 7, "world": "default-0123456789ab",
                                                 "catalogue_sha256": catalogue_sha256()}))
    cards = _cards(src)
    assert sorted(cards) == sorted(c.id for c in catalogue(CardWorld("default", 7))) and len(cards) == 24
    s05 = cards["S05"]
    assert all(m.dataset.sha256 == tasks.dataset_sha256(m.dataset.id, 7) for m in s05.data.mix)
    assert s05.data.mix[0].dataset.sha256 != tasks.dataset_sha256(s05.data.mix[0].dataset.id, 8)  # the seed's own
    assert s05.budget.steps == max(4, round(120 * STEP_SCALE["default"]))
    assert not (tmp_path / "empty-cache").exists()  # nothing built
    (src / "ledger.json").write_text(json.dumps({"world_seed": 7, "world": "huge-0123456789ab",
                                                 "catalogue_sha256": catalogue_sha256()}))
    with pytest.raises(BadInput, match="ledger names world 'huge-0123456789ab': unknown world size 'huge'"):
        _cards(src)


def test_each_worlds_runs_read_that_worlds_record_of_a_card(tmp_path):
    from agent.experiments.fitted import gonogo_inputs  # noqa: PLC0415

    sources = _sources(tmp_path, worlds=(0, 1))
    for w, s in ((0, 0.2), (1, 0.9)):  # the same cards, compiled against two worlds' base models
        lines = [json.dumps({"cell": c.name, "features": {"S": s, "A": 1.0, "grade": "B"}})
                 for c in sorted((sources[w] / "cells").iterdir())]
        (sources[w] / "features.jsonl").write_text("\n".join(lines) + "\n")
    runs, records = gonogo_inputs(sources)
    x = gonogo_features.matrix(runs, records)
    col = gonogo_features.FEATURE_NAMES.index("S")
    assert {(r.world_seed, float(v)) for r, v in zip(runs, x[:, col])} == {(0, 0.2), (1, 0.9)}


SHAPE = "not an object with a string `cell` and an object `features`"


@pytest.mark.parametrize("line, why", [("garbage", "not valid JSON"), ('{"cell": "S01"}', SHAPE), ("[1]", SHAPE),
                                        ('{"cell": ["S01"], "features": {}}', SHAPE),
                                        ('{"cell": "S01", "features": null}', SHAPE),
                                        ('{"cell": "S01", "features": [1, 2]}', SHAPE),
                                        ('{"cell": "S01", "features": {"A": "high"}}', "could not convert string")])
def test_a_damaged_features_line_is_refused_in_one_line_naming_the_file_and_line(tmp_path, line, why):
    from agent.experiments.fitted import gonogo_inputs  # noqa: PLC0415

    source = _sources(tmp_path, worlds=(0,))[0]
    good = json.dumps({"cell": "S01", "features": {"S": 0.2, "A": 1.0, "grade": "B"}})
    (source / "features.jsonl").write_text(f"{good}\n{line}\n")
    with pytest.raises(BadInput, match=f"features.jsonl line 2 is not a frozen cell record .*{why}") as exc:
        gonogo_inputs([source])
    assert "\n" not in str(exc.value)


def test_a_features_file_that_is_a_folder_is_refused_not_read_as_none(tmp_path):
    from agent.experiments.fitted import gonogo_inputs  # noqa: PLC0415

    source = _sources(tmp_path, worlds=(0,))[0]
    (source / "features.jsonl").mkdir()
    with pytest.raises(BadInput, match="cannot read retrospective features .*features.jsonl"):
        gonogo_inputs([source])


def test_a_refused_fit_writes_nothing(tmp_path, monkeypatch):
    from agent.world.catalogue import catalogue_sha256  # noqa: PLC0415

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "empty-cache"))
    sources = _sources(tmp_path, worlds=(0, 1))
    (sources[1] / "ledger.json").write_text(json.dumps({"world_seed": 1, "world": "huge-0123456789ab",
                                                        "catalogue_sha256": catalogue_sha256()}))
    out = tmp_path / "cmp" / "world-0"
    with pytest.raises(BadInput, match="unknown world size"):  # the go/no-go reads the cards, after the extrapolation
        fit_for_world(out, 0, sources, gonogo=True)
    assert not out.exists() or list(out.iterdir()) == []


def test_bcit_predictive_needs_no_model_file_when_the_comparison_fits_one(tmp_path, capsys):
    sources = _sources(tmp_path, worlds=(1,))
    out = tmp_path / "cmp"
    # no --gonogo-model: --fit-from supplies it, so the refusal is the fit's own (world 1 has no other source)
    code = main(["compare", "--policies", "bcit,bcit_predictive", "--world-seeds", "1", "--fit-from", str(sources[0]),
                 "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "every source is of world seed 1" in err and "needs a fitted go/no-go" not in err
