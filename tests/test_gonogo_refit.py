"""The go/no-go refit at consolidation (issue 27, item 3): the model file carries its training rows,
a refit adds an episode's paired runs, the new library version stores it, and `--gonogo-model
library` reads it back into a later run's manifest.

Models are fitted by the real code on synthetic paired runs (support/gonogo_fixture.py); episodes run
on the loop's fakes (support/graph_fakes.py), with a trial that records its curve."""

from __future__ import annotations

import json
import shutil
import sqlite3

import numpy as np
import pytest
from sqlite_utils import Database

from agent.cli.main import main
from agent.config import RunConfig
from agent.run.gonogo_model import LIBRARY, LIBRARY_KIND, check_resume, frozen_model, read_model
from agent.run.gonogo_refit import episode_runs
from agent.run.report_inputs import ReportInputs
from experience_bank import migrations
from experience_bank.bank import Bank
from experience_bank.errors import BadInput
from experience_bank.hashing import sha256_text
from experience_bank.results import TrialPoint
from policies import gonogo, gonogo_features
from support.gonogo_fixture import RULE, fitted_model, on_parent, parent_model, synthetic_runs
from support.graph_fakes import FakePorts, make_ctx, run_fake


def _same_fit(a: gonogo.GoNoGo, b: gonogo.GoNoGo) -> bool:
    return (a.mean, a.scale, a.harmful, a.beneficial, a.threshold) == (b.mean, b.scale, b.harmful, b.beneficial,
                                                                        b.threshold)


# --- the pure refit ----------------------------------------------------------------------------------


def test_a_refit_on_the_stored_rows_alone_reproduces_the_model():
    model = gonogo.loads(gonogo.dumps(parent_model()))  # the rows went through JSON
    again = gonogo.refit(model, [], [], library_version=None)
    assert _same_fit(again, model) and again.training_hash == model.training_hash and again.n_train == 36
    assert model.rows is not None and np.array(model.rows.x).shape == (36, len(gonogo_features.FEATURE_NAMES))


def test_a_refit_adds_exactly_the_new_runs_and_equals_a_fit_on_all_of_them():
    old = on_parent(synthetic_runs())
    new = [r.model_copy(update={"card_id": f"N{i}"}) for i, r in enumerate(on_parent(synthetic_runs(n=6, seed=1)))]
    model = gonogo.fit(old, alpha=0.2, delta=0.2, **RULE)
    records = [{"S": 0.5, "A": 1.0, "grade": "B"}] + [None] * 5
    refit = gonogo.refit(gonogo.loads(gonogo.dumps(model)), new, records, library_version=7)
    assert (refit.n_train, refit.library_version, refit.footing, refit.alpha, refit.delta, refit.C) == (
        42, 7, "parent", model.alpha, model.delta, model.C)
    assert refit.rows.labels[36:] == tuple(r.outcome(**RULE) for r in new)
    assert refit.rows.card_ids[36:] == tuple(r.card_id for r in new)
    assert refit.training_hash == gonogo.refit_hash(model.training_hash, new, records) != model.training_hash
    # the same rows fitted from scratch give the same numbers: the stored rows are what `fit` read
    from_scratch = gonogo.fit(old + new, {gonogo_features.record_key(r.world_seed, r.card_id): rec for r, rec in zip(new, records) if rec}, alpha=0.2,
                              delta=0.2, **RULE)
    assert _same_fit(refit, from_scratch) and refit.rows == from_scratch.rows


def test_a_split_calibration_is_kept_by_the_refit():
    runs = on_parent(synthetic_runs())
    model = gonogo.fit(runs[:24], alpha=0.3, delta=0.2, calibration=runs[24:], **RULE)
    refit = gonogo.refit(model, runs[24:30], [None] * 6, library_version=1)
    assert (refit.threshold.calibration, refit.threshold.n_calibration, refit.n_train) == ("split", 12, 30)
    assert refit.rows.calibration_x == model.rows.calibration_x


def test_a_model_without_rows_still_decides_and_its_refit_is_one_line_bad_input():
    model = fitted_model()
    old = json.loads(gonogo.dumps(model))
    del old["rows"]  # a file written before the rows were kept
    loaded = gonogo.loads(json.dumps(old))
    assert loaded.rows is None and _same_fit(loaded, model)
    with pytest.raises(BadInput) as err:
        gonogo.refit(loaded, on_parent(synthetic_runs(n=3)), [None] * 3, library_version=1)
    assert "\n" not in str(err.value) and "no training rows" in str(err.value) and "agent gonogo" in str(err.value)


def test_a_parent_footing_model_refuses_runs_without_their_parent_curve():
    with pytest.raises(BadInput, match="no parent scores"):
        gonogo.refit(parent_model(), synthetic_runs(n=3), [None] * 3, library_version=1)


# --- the bank stores text beside a version -------------------------------------------------------------


def _finished_episode(bank: Bank, episode: str = "E1") -> None:
    bank.start_episode(episode, "a" * 64, bank.current_library_version())
    bank.finish_episode(episode)


def test_an_artefact_is_stored_with_its_version_found_by_later_versions_and_verified(tmp_path):
    path = tmp_path / "b.sqlite"
    with Bank.init(path) as bank:
        bank.create_library_version([], "L0")
        _finished_episode(bank)
        v1 = bank.consolidate("E1", artefacts=lambda v: {"gonogo": f"model of version {v}"})
        _finished_episode(bank, "E2")
        v2 = bank.consolidate("E2")  # stores none: the version before still answers
        assert bank.artefact("gonogo") == bank.artefact("gonogo", v2) == (v1, f"model of version {v1}")
        assert bank.artefact("gonogo", v1 - 1) is None and bank.artefact("other") is None
        assert bank.verify(against=str(path) + ".heads") == []
        bank.db.execute("DROP TRIGGER library_artefacts_no_update")
        bank.db.execute("UPDATE library_artefacts SET body = 'edited'")
        problems = bank.verify()
    assert any("does not match its sha256" in p for p in problems)


def test_an_artefact_that_fails_rolls_the_whole_consolidation_back(tmp_path):
    path = tmp_path / "b.sqlite"
    with Bank.init(path) as bank:
        bank.create_library_version([], "L0")
        _finished_episode(bank)
        before, heads = bank.current_library_version(), (tmp_path / "b.sqlite.heads").read_bytes()

        def failing(version):
            raise BadInput("no refit")
        with pytest.raises(BadInput, match="no refit"):
            bank.consolidate("E1", artefacts=failing)
        assert bank.current_library_version() == before and bank.verify() == []
        assert (tmp_path / "b.sqlite.heads").read_bytes() == heads
        assert bank.consolidate("E1") == before + 1


# --- an episode's consolidation refits, and a later run reads the refit ----------------------------------


class CurvePorts(FakePorts):
    """The fakes, with a trial that records its curve (rising with the card's planned gain), an IFEval
    suite with both strict metrics and features that name the record compiled by its hash, as
    policies.features.compile does: what an episode's paired run reads."""

    def compile(self, entry, ctx):
        return super().compile(entry, ctx).model_copy(update={"record_hash": entry.hash})

    def evaluate(self, model_dir, split, out_dir):
        out = super().evaluate(model_dir, split, out_dir)
        metrics = {"prompt_strict": 50.0, "inst_strict": 60.0}
        return out | {"ifeval": out["ifeval"].model_copy(update={"metrics": metrics})}

    def trial(self, card, parent_dir, out_dir, run_key, measure):
        t = super().trial(card, parent_dir, out_dir, run_key, measure)
        flat = {"ifeval.prompt_strict": 0.0, "ifeval.inst_strict": 0.0}
        return t.model_copy(update={"curve": tuple(
            TrialPoint(fraction=f, step=max(1, round(20 * f)), delta_val=t.delta_val * f / 0.2, retention_deltas=flat)
            for f in (0.05, 0.10, 0.20))})


def _episode(tmp_path, model: gonogo.GoNoGo | None, policy: str = "bcit_predictive"):
    path = None
    tmp_path.mkdir(parents=True, exist_ok=True)
    if model is not None:
        path = tmp_path / "model.json"
        path.write_text(gonogo.dumps(model), encoding="utf-8")
    run = tmp_path / "run"
    final = run_fake(run, policy=policy, gonogo_model=str(path) if path else None, max_rejections=10,
                     ports=CurvePorts(run))
    inputs = ReportInputs.model_validate_json((run / "report_inputs.json").read_text())
    return run, final, inputs


def test_consolidation_stores_the_refit_on_the_episodes_paired_runs(tmp_path):
    before = parent_model()
    run, final, inputs = _episode(tmp_path, before)
    with Bank.open(run / "bank.sqlite") as bank:
        events = bank.events("E-fake")
        version, text = bank.artefact(LIBRARY_KIND)
        assert bank.verify(against=str(run / "bank.sqlite") + ".heads") == []
    paired = [e for e in events if e.trial_curve and e.target_gain is not None]
    assert version == final["library_version"] and len(paired) >= 1  # the fake plan runs S02's trial and full run
    after = gonogo.loads(text)
    assert (after.n_train, after.library_version, after.footing) == (before.n_train + len(paired), version, "parent")
    assert after.training_hash != before.training_hash and after.rows.x[:36] == before.rows.x
    assert after.rows.card_ids[36:] == tuple(e.candidate_id for e in paired)
    assert after.rows.labels[36:] == tuple("beneficial" if e.target_gain >= RULE["band"] else "neutral"
                                           for e in paired)  # flat IFEval, no hard failure: the target decides
    refit = inputs.gonogo_refit
    assert (refit.refit, refit.added, refit.n_train_before, refit.n_train_after, refit.library_version) == (
        True, len(paired), 36, after.n_train, version)
    assert (refit.threshold_before, refit.threshold_after) == (before.threshold.threshold, after.threshold.threshold)
    assert refit.sha256 == sha256_text(text)
    report = (run / "report.md").read_text()
    assert "Go/no-go refit at consolidation" in report and f"| paired runs (n_train) | 36 | {after.n_train} |" in report


def test_a_policy_without_a_model_stores_nothing(tmp_path):
    run, final, inputs = _episode(tmp_path, None, policy="bcit")
    with Bank.open(run / "bank.sqlite") as bank:
        assert bank.artefact(LIBRARY_KIND) is None and final["library_version"] == bank.current_library_version()
        assert bank.db.execute("SELECT count(*) FROM library_artefacts").fetchone() == (0,)
    assert inputs.gonogo_refit is None and "Go/no-go refit" not in (run / "report.md").read_text()


@pytest.mark.parametrize("model, why", [
    (fitted_model(), "control footing"),
    (gonogo.loads(json.dumps({k: v for k, v in json.loads(gonogo.dumps(parent_model())).items() if k != "rows"})),
     "no training rows"),
])
def test_a_model_that_cannot_be_refit_is_said_so_and_nothing_is_stored(tmp_path, model, why):
    run, final, inputs = _episode(tmp_path, model)
    with Bank.open(run / "bank.sqlite") as bank:
        assert bank.artefact(LIBRARY_KIND) is None and final["library_version"] == bank.current_library_version()
    assert not inputs.gonogo_refit.refit and why in inputs.gonogo_refit.reason
    assert f"Not refit: {inputs.gonogo_refit.reason}" in (run / "report.md").read_text()


def test_the_episode_runs_are_read_on_the_parent_footing_with_the_decisions_records(tmp_path):
    run, _, _ = _episode(tmp_path, parent_model())
    ctx, _, bank = make_ctx(run, policy="bcit_predictive")  # the started run: its manifest and library
    try:
        events = bank.events("E-fake")
        runs, records = episode_runs(events, {h: e.record.card for h, e in ctx.entries.items()}, ctx.manifest)
    finally:
        bank.close()
    paired = [e for e in events if e.trial_curve and e.target_gain is not None]
    assert [r.card_id for r in runs] == [e.candidate_id for e in paired]
    assert all(r.parent_curve == r.curve and r.full.target_pp == e.target_gain for r, e in zip(runs, paired))
    assert records == [e.decision.features.model_dump(include={"S", "A", "grade"}) for e in paired]


def test_library_round_trips_the_refit_through_a_later_runs_manifest(tmp_path):
    first, _, _ = _episode(tmp_path / "first", parent_model())
    later = tmp_path / "later"
    later.mkdir()
    for name in ("bank.sqlite", "bank.sqlite.heads"):
        shutil.copy(first / name, later / name)
    with Bank.open(later / "bank.sqlite") as bank:
        version, text = bank.artefact(LIBRARY_KIND)
    ctx, _, bank = make_ctx(later, policy="bcit_predictive", gonogo_model=LIBRARY, episode_id="E-later")
    bank.close()
    info, refit = ctx.manifest.gonogo, gonogo.loads(text)
    assert (info.source, info.sha256, info.training_hash, info.n_train, info.library_version) == (
        LIBRARY, sha256_text(text), refit.training_hash, refit.n_train, version)
    assert ctx.rundir.gonogo_file.read_text() == text and frozen_model(ctx.rundir, ctx.manifest) == refit
    (later / LIBRARY).write_text("a file named library is not the bank's model")
    check_resume(ctx.rundir, ctx.manifest)  # the bank's artefact is frozen: nothing else to compare


def _listing(root):
    return sorted((str(p.relative_to(root)), p.read_bytes() if p.is_file() else b"") for p in root.rglob("*"))


@pytest.mark.parametrize("with_bank", [False, True])
def test_library_without_a_refit_is_one_line_bad_input_and_changes_nothing(tmp_path, monkeypatch, capsys, with_bank):
    monkeypatch.chdir(tmp_path)
    if with_bank:
        with Bank.init(tmp_path / "b.sqlite") as bank:
            _finished_episode(bank)
            bank.consolidate("E1")
    before = _listing(tmp_path)
    assert main(["run", "--policy", "bcit_predictive", "--gonogo-model", LIBRARY, "--out", "runs/ep-x",
                 "--bank", "b.sqlite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gonogo-model library" in err[0] and "agent gonogo SOURCES --model OUT.json" in err[0]
    assert _listing(tmp_path) == before


def test_read_model_with_library_reads_the_version_the_episode_starts_on(tmp_path):
    path = tmp_path / "b.sqlite"
    with Bank.init(path) as bank:
        bank.create_library_version([], "L0")
        _finished_episode(bank)
        v1 = bank.consolidate("E1", artefacts=lambda v: {LIBRARY_KIND: gonogo.dumps(parent_model())})
        cfg = RunConfig(policy="bcit_predictive", gonogo_model=LIBRARY, bank=str(path))
        text, info = read_model(cfg, bank, v1)
        assert info.sha256 == sha256_text(text) and info.source == LIBRARY
        with pytest.raises(BadInput, match="there is none yet"):
            read_model(cfg, bank, v1 - 1)


def test_library_on_a_bank_older_than_artefacts_is_refused_without_migrating_it(tmp_path):
    path = tmp_path / "old.sqlite"
    db = Database(sqlite3.connect(path, isolation_level=None))
    migrations.apply(db, list(migrations.MIGRATIONS[:5]))
    db.execute("PRAGMA user_version = 5")
    db.conn.close()
    before = _listing(tmp_path)
    with pytest.raises(BadInput, match="there is none yet"):
        read_model(RunConfig(policy="bcit_predictive", gonogo_model=LIBRARY, bank=str(path)))
    assert _listing(tmp_path) == before


def test_compare_refuses_library_before_any_episode(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(f"gonogo_model: {LIBRARY}\n")
    assert main(["compare", "--policies", "bcit,bcit_predictive", "--seeds", "2", "--out", "c",
                 "--config", "c.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fresh bank" in err[0] and not (tmp_path / "c").exists()
