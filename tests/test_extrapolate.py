"""Forgetting extrapolated to full length (policies/extrapolate.py, `agent extrapolate`)."""

import json
from pathlib import Path

import numpy as np
import pytest

from agent.cli.main import main
from agent.experiments.extrapolation import load_runs, measure
from agent.experiments.retro_cells import IFEVAL_DROP_PP
from agent.world.catalogue import adapter_kinds, catalogue_sha256
from experience_bank.errors import BadInput
from policies.curves import RETENTION, CurvePoint, PairedRun, paired_run, paired_runs_json, trial_curve
from policies.extrapolate import fit, guard_check, power_fit, predict
from policies.extrapolate_heldout import extrapolation_error, held_out

V3 = Path(__file__).parents[1] / "docs/results/retrospective-default.json"
FRACTIONS = (0.05, 0.10, 0.20)


def _point(f: float, value: float) -> CurvePoint:
    return CurvePoint(fraction=f, target_pp=0.0, retention_pp={m: value for m in RETENTION})


def _run(card: str, values: list[float], *, method: str = "sft", adapter: str | None = None, world: int = 0,
         seed: int = 0) -> PairedRun:
    return PairedRun(card_id=card, family="sql", method=method, seed=seed, world_seed=world, adapter=adapter,
                     curve=tuple(_point(f, v) for f, v in zip(FRACTIONS, values)), full=_point(1.0, values[-1]))


def _power_runs(b: float, n: int = 12, noise: float = 0.3, seed: int = 0) -> list[PairedRun]:
    rng = np.random.default_rng(seed)
    scales = rng.normal(-10.0, 2.0, n)
    return [_run(f"S{i:02d}", [c * f ** b + rng.normal(0, noise) for f in (*FRACTIONS, 1.0)])
            for i, c in enumerate(scales)]


@pytest.mark.parametrize("b", [0.5, 1.0, 2.0])
def test_the_power_law_recovers_a_known_exponent_from_noisy_curves(b):
    runs = _power_runs(b)
    c, b_hat, se = power_fit(runs, "ifeval.prompt_strict")
    assert abs(b_hat - b) < 0.15 and se < 0.5
    assert abs(c - np.mean([r.full.retention_pp["ifeval.prompt_strict"] for r in runs])) < 0.5
    # Where the curves follow a power law, the fit's growth from 20 % to full is c (1 - 0.2^b).
    mf = fit(runs).groups[0].metrics["ifeval.prompt_strict"]
    assert mf.growth_power_pp == pytest.approx(c * (1 - 0.2 ** b_hat))
    assert abs(mf.growth_pp - c * (1 - 0.2 ** b)) < 1.0


def test_a_shared_offset_at_the_trial_is_learned_as_growth_and_the_interval_holds_the_truth():
    # A control reading 6 pp low at 20 % shifts every run's trial up by 6: the v3 pattern (gain at 20 %, loss at full).
    rng = np.random.default_rng(1)
    runs = [_run(f"S{i:02d}", [0.0, 8.0, 6.0 + x]) for i, x in enumerate(rng.normal(0, 3.0, 10))]
    runs = [r.model_copy(update={"full": _point(1.0, r.curve[-1].retention_pp["ifeval.prompt_strict"] - 10.0
                                                + rng.normal(0, 0.5))}) for r in runs]
    f = fit(runs)
    new = _run("S99", [0.0, 8.0, 7.0, -3.0]).curve
    p = predict(f, new, method="sft").metrics["ifeval.prompt_strict"]
    assert p.reading_pp == 7.0
    assert abs(p.predicted_pp - (-3.0)) < 0.7
    assert p.interval_pp[0] < -3.0 < p.interval_pp[1]
    forced = fit(runs, choice="power").groups[0].metrics["ifeval.prompt_strict"]
    assert (forced.model, forced.growth_pp) == ("power", forced.growth_power_pp)


def test_held_out_runs_are_predicted_by_a_fit_that_never_saw_their_cell():
    runs = _power_runs(1.0, n=8)
    runs[3] = runs[3].model_copy(update={"full": _point(1.0, -60.0)})  # an outlier: visible if it leaked
    runs.append(runs[3].model_copy(update={"seed": 1}))                  # the same cell at a second seed
    rows = {(r.card_id, r.seed): r for r in held_out(runs, drop_pp=IFEVAL_DROP_PP)}
    others = [r for r in runs if r.card_id != "S03"]
    for seed in (0, 1):
        alone = predict(fit(others), runs[3].curve, method="sft").metrics
        assert rows[("S03", seed)].metrics == alone
    leaked = predict(fit(runs), runs[3].curve, method="sft").metrics["ifeval.prompt_strict"].predicted_pp
    assert rows[("S03", 0)].metrics["ifeval.prompt_strict"].predicted_pp != pytest.approx(leaked)


def test_leave_one_world_out_holds_a_whole_world_out():
    w0 = _power_runs(1.0, n=6, seed=0)
    w1 = [r.model_copy(update={"world_seed": 1}) for r in _power_runs(1.0, n=6, seed=5)]
    rows = held_out(w0 + w1, drop_pp=IFEVAL_DROP_PP, holdout="world")
    assert [r.metrics for r in rows if r.world_seed == 1] == [
        predict(fit(w0), r.curve, method="sft").metrics for r in w1]
    with pytest.raises(BadInput, match="at least two world seeds"):
        held_out(w0, drop_pp=IFEVAL_DROP_PP, holdout="world")


def test_a_small_group_falls_back_and_says_so():
    runs = ([_run(f"S{i}", [1, 2, 3 + i, -4 + i], adapter="full") for i in range(5)] +
            [_run(f"L{i}", [1, 2, 3 + i, -4 + i], adapter="lora") for i in range(2)] +
            [_run(f"G{i}", [0, 0, -1, 0.5], method="grpo", adapter="full") for i in range(5)])
    f = fit(runs)
    assert "sft/lora: 2 runs" in f.skipped
    p = predict(f, runs[5].curve, method="sft", adapter="lora")
    assert p.group == "sft/*" and "sft/lora has fewer than 4 runs" in p.fallback
    assert predict(f, runs[0].curve, method="sft", adapter="full").fallback is None
    with pytest.raises(BadInput, match="at least 4 paired runs"):
        fit(runs[:3])
    for low in (-5, 0, 2):  # the option is named, not the data: 23 runs are plenty
        with pytest.raises(BadInput, match=f"^min_runs {low} is below 3.*pass --min-runs 3 or more$"):
            fit(runs, min_runs=low)


def test_the_guard_check_reports_the_raw_reading_and_the_extrapolation():
    runs = [_run(f"S{i:02d}", [0, 8, 5 + i % 3, -5 + i % 3]) for i in range(8)]
    p = predict(fit(runs), runs[0].curve, method="sft")
    check = guard_check(p, drop_pp=IFEVAL_DROP_PP)
    assert check.raw_safe and not check.extrapolated_safe  # +5 at 20 %, about -5 at full
    assert p.metrics["ifeval.prompt_strict"].predicted_pp == pytest.approx(-5.0)
    assert "20 % reading +5.0 pp, extrapolated full length -5.0 pp" in check.reasons[0]
    assert check.drop_pp == IFEVAL_DROP_PP


@pytest.fixture(scope="module")
def v3_report():
    return extrapolation_error(paired_runs_json(V3), drop_pp=IFEVAL_DROP_PP)


def test_on_v3_the_extrapolation_beats_the_raw_reading(v3_report):
    sft = v3_report.errors["ifeval.prompt_strict"]["sft"]
    assert sft.n == 12 and sft.raw_mean_pp == pytest.approx(10.4167, abs=1e-3)  # docs/results/extrapolation-v3-mae.md
    assert sft.extrapolated_mean_pp == pytest.approx(2.3075, abs=1e-3)  # 2.2406 by the RMS choice (extrapolation-v3.md)
    assert (v3_report.guard["all"].raw_right, v3_report.guard["all"].extrapolated_right) == (12, 23)


def test_the_cli_writes_the_numbers_the_function_computes(tmp_path, v3_report, capsys):
    out = tmp_path / "x.md"
    assert main(["extrapolate", "--retrospective", str(V3), "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["reports"][0] == v3_report.model_dump(mode="json")
    s = v3_report.errors["ifeval.inst_strict"]["all"]
    assert f"| inst | all | 24 | {s.raw_mean_pp:.2f}" in out.read_text()
    assert f"|extrapolated - full| {s.extrapolated_mean_pp:.2f} pp" in capsys.readouterr().out


def test_several_retrospective_directories_are_held_out_by_world(tmp_path):
    cells = json.loads(V3.read_text())["cells"][:8]  # S01-S04, G01-G04: two groups of four
    for world in (0, 1):
        (tmp_path / f"w{world}").mkdir()
        ledger = {"world_seed": world, "catalogue_sha256": catalogue_sha256() if world else "v3"}
        (tmp_path / f"w{world}/ledger.json").write_text(json.dumps(ledger))
        for c in cells:
            d = tmp_path / f"w{world}/cells/{c['id']}/s0"
            d.mkdir(parents=True)
            (d / "cell.json").write_text(json.dumps(c))
    _, reports = measure([tmp_path / "w0", tmp_path / "w1"])
    assert [r.holdout for r in reports] == ["cell", "world"]
    assert reports[1].guard["all"].n == 16
    runs = load_runs([tmp_path / "w0", tmp_path / "w1"])  # only w1 ran this catalogue: its cards name adapters
    assert {r.card_id: r.adapter for r in runs if r.world_seed == 1} == {c["id"]: adapter_kinds()[c["id"]] for c in cells}
    assert {r.adapter for r in runs if r.world_seed == 0} == {None} and "lora" in {r.adapter for r in runs}
    with pytest.raises(BadInput, match="came twice"):
        load_runs([tmp_path / "w0", tmp_path / "w0"])


@pytest.mark.parametrize("make, name", [(lambda p: p / "missing", "out.md"),
                                        (lambda p: (p / "bad.json").write_text("[1]") and p / "bad.json", "out.md"),
                                        (lambda p: V3, "out.json")])
def test_bad_input_exits_2_in_one_line_and_writes_nothing(tmp_path, capsys, make, name):
    out = tmp_path / name
    assert main(["extrapolate", "--retrospective", str(make(tmp_path)), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(("agent: error: --retrospective", "agent: error: --out")) or "not a retrospective JSON" in err
    assert len(err.splitlines()) == 1 and list(tmp_path.glob("out*")) == []


def _hand_runs(parent: bool = True) -> list[PairedRun]:
    """Five cells (support/footing_cells.py) whose 20 % effects are e = 1..5 on both IFEval metrics and
    whose full runs are e - 3: on the parent footing the 20 % reading is e + 75 - 70 = e + 5 (prompt)
    and e + 80 - 80 = e (inst)."""
    from support.footing_cells import cell  # noqa: PLC0415
    return [paired_run(cell(f"S{e}", {"0.05": (0, 0, 0), "0.10": (0, 0, 0), "0.20": (0.0, e, e)}, (0.0, e - 3, e - 3),
                            parent=parent or e > 1), world_seed=0) for e in range(1, 6)]


def test_on_the_parent_footing_the_growth_runs_from_the_loops_reading_to_the_controlled_full_run():
    f = fit(_hand_runs(), choice="offset")
    assert (f.footing, f.footing_note) == ("parent", None)
    mf = f.groups[0].metrics
    assert (mf["ifeval.prompt_strict"].growth_pp, mf["ifeval.inst_strict"].growth_pp) == (-8.0, -3.0)
    # A loop's trial (its curve against the parent) reading +4 prompt, +1 inst at 20 %: -4 and -2 at full length.
    trial = trial_curve({"0.20": {"target": 0.0, "ifeval.prompt_strict": 4.0, "ifeval.inst_strict": 1.0}})
    p = predict(f, trial, method="sft").metrics
    assert (p["ifeval.prompt_strict"].predicted_pp, p["ifeval.inst_strict"].predicted_pp) == (-4.0, -2.0)
    assert p["ifeval.prompt_strict"].interval_pp == (-4.0, -4.0)  # every leave-one-out error is 0
    # Held out cell by cell, every fold on the parent footing: the raw reading is 8 (prompt) and 3 (inst) off.
    for row in held_out(_hand_runs(), drop_pp=IFEVAL_DROP_PP, choice="offset"):
        m = row.metrics
        assert m["ifeval.prompt_strict"].reading_pp - row.full_pp["ifeval.prompt_strict"] == 8.0
        assert m["ifeval.inst_strict"].reading_pp - row.full_pp["ifeval.inst_strict"] == 3.0
        assert m["ifeval.prompt_strict"].predicted_pp == row.full_pp["ifeval.prompt_strict"]


def test_one_run_without_parent_scores_puts_the_whole_fit_on_the_control_footing_and_says_so():
    f = fit(_hand_runs(parent=False), choice="offset")
    assert f.footing == "control" and "1 of 5 paired runs lack the parent's scores" in f.footing_note
    assert f.groups[0].metrics["ifeval.prompt_strict"].growth_pp == -3.0  # full - effect, for every run
    rows = held_out(_hand_runs(parent=False), drop_pp=IFEVAL_DROP_PP, choice="offset")
    assert {r.metrics["ifeval.prompt_strict"].reading_pp - r.full_pp["ifeval.prompt_strict"] for r in rows} == {3.0}


# --- the model frozen into a run (agent run --extrapolation-model) ----------------------------------


def test_the_cli_saves_the_fit_it_reports_and_a_run_reads_it(tmp_path, capsys):
    from agent.config import RunConfig  # noqa: PLC0415
    from agent.run.extrapolation_model import read_model  # noqa: PLC0415
    from policies.curves import CONTROL_FOOTING_WARNING  # noqa: PLC0415
    from policies.extrapolate import loads  # noqa: PLC0415
    saved = tmp_path / "fit.json"
    assert main(["extrapolate", "--retrospective", str(V3), "--out", str(tmp_path / "x.md"), "--save", str(saved)]) == 0
    assert "(control footing: fitted on control footing" in capsys.readouterr().out
    fitted = loads(saved.read_text())
    assert fitted == fit(paired_runs_json(V3)) and (fitted.footing, fitted.n_runs) == ("control", 24)
    _, info = read_model(RunConfig(extrapolation_model=str(saved)))
    assert (info.groups, info.trial_fraction, info.footing_warning) == (
        ("grpo/*", "sft/*", "*/*"), 0.2, CONTROL_FOOTING_WARNING)
    assert info.training_hash == fitted.training_hash and info.n_runs == 24


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("extra, needle", [
    (["--extrapolation-model", "missing.json"], "extrapolation model missing.json does not exist"),
    (["--extrapolation-model", "bad.json"], "--extrapolation-model bad.json: invalid extrapolation model"),
    (["--extrapolation-model", "cut.json"], "--extrapolation-model cut.json: invalid extrapolation model: not valid JSON"),
    (["--extrapolation-model", "tenth.json"], "fitted at trial fractions [0.1], the run's trials stop at 0.2"),
])
def test_a_missing_defective_or_mismatched_model_is_bad_input_and_writes_nothing(tmp_path, monkeypatch, capsys,
                                                                                   extra, needle):
    from support.extrapolation_fixture import fitted  # noqa: PLC0415
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text('{"groups": []}')
    (tmp_path / "cut.json").write_text('{"groups": [')
    tenth = fitted().model_copy(update={"groups": tuple(g.model_copy(update={"trial_fraction": 0.1})
                                                         for g in fitted().groups)})
    (tmp_path / "tenth.json").write_text(tenth.model_dump_json())
    before = _listing(tmp_path)
    assert main(["run", "--out", "runs/ep-x", "--bank", "b.sqlite", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    assert _listing(tmp_path) == before


def test_the_manifest_freezes_the_model_and_a_changed_file_refuses_the_resume(tmp_path):
    from agent.run.extrapolation_model import check_resume, frozen_guard  # noqa: PLC0415
    from experience_bank.hashing import sha256_text  # noqa: PLC0415
    from support import extrapolation_fixture  # noqa: PLC0415
    from support.graph_fakes import make_ctx  # noqa: PLC0415
    path = extrapolation_fixture.write_model(tmp_path / "fit.json")
    ctx, _, bank = make_ctx(tmp_path / "run", policy="bcit", extrapolation_model=str(path))
    bank.close()
    info = ctx.manifest.extrapolation
    assert info.sha256 == sha256_text(path.read_text()) == sha256_text(ctx.rundir.extrapolation_file.read_text())
    assert (info.footing, info.footing_warning, info.groups) == ("parent", None, ("sft/*", "*/*"))
    guard = frozen_guard(ctx.rundir, ctx.manifest)
    assert guard.fit == extrapolation_fixture.fitted() and guard.drop_pp == ctx.manifest.gate.ifeval_max_drop_pp
    check_resume(ctx.rundir, ctx.manifest)  # unchanged: fine
    path.unlink()
    check_resume(ctx.rundir, ctx.manifest)  # the user's file gone: the frozen copy decides
    path.write_text(extrapolation_fixture.fitted().model_copy(update={"min_runs": 5}).model_dump_json())
    with pytest.raises(BadInput, match="extrapolation model .* changed since run started"):
        check_resume(ctx.rundir, ctx.manifest)
    extrapolation_fixture.write_model(path)
    ctx.rundir.extrapolation_file.write_text(ctx.rundir.extrapolation_file.read_text().replace('"min_runs":4', '"min_runs":5'))
    with pytest.raises(BadInput, match="differs from the model the run froze"):
        check_resume(ctx.rundir, ctx.manifest)
    other, _, bank = make_ctx(tmp_path / "none", policy="bcit")
    bank.close()
    assert other.manifest.extrapolation is None and frozen_guard(other.rundir, other.manifest) is None


def test_where_no_growth_predicts_a_held_out_world_better_the_raw_reading_is_chosen():
    # Two worlds: world 0's runs lose 10 pp after the trial (an aggressive recipe), world 1's lose nothing.
    # An offset fitted on one world misleads the other; the raw reading (none) errs by 5 pp on average less.
    w0 = [_run(f"A{i}", [-50.0, -55.0, -60.0 + 0.1 * i, -70.0 + 0.1 * i]) for i in range(4)]
    w1 = [_run(f"S{i}", [0.0, 0.0, -1.0 + 0.1 * i, -1.0 + 0.1 * i], world=1) for i in range(4)]
    mf = fit(w0 + w1).groups[0].metrics["ifeval.prompt_strict"]
    assert mf.heldout == "world" and mf.model == "none" and mf.growth_pp == 0.0
    assert mf.heldout_mae_pp["none"] == pytest.approx(5.0) and mf.heldout_mae_pp["offset"] == pytest.approx(10.0)
    # one world whose runs all lose 10 pp after the trial: a run held out at a time, and the offset is chosen
    one = fit(w0).groups[0].metrics["ifeval.prompt_strict"]
    assert one.heldout == "run" and one.model != "none" and one.growth_pp == pytest.approx(-10.0, abs=0.5)
    assert fit(w0 + w1, choice="none").groups[0].metrics["ifeval.prompt_strict"].model == "none"


def test_the_open_errors_are_those_of_the_runs_whose_reading_keeps_within_the_guard():
    # Two collapsing runs (-40 pp at the trial, -60 at full length) beside runs near zero: the mean error
    # over every run is theirs; over the runs the reading leaves within the guard, it is the small one.
    runs = [_run(f"S{i:02d}", [0.0, -0.5, -1.0 - 0.1 * i], world=i % 2) for i in range(8)]
    runs += [PairedRun(**(r.model_dump() | {"full": _point(1.0, -60.0)})) for r in
             [_run(f"C{i}", [-5.0, -15.0, -40.0], world=i) for i in range(2)]]
    rep = extrapolation_error(runs, drop_pp=IFEVAL_DROP_PP, choice="none")
    for m in RETENTION:
        every, opened = rep.errors[m]["all"], rep.open_errors[m]["all"]
        assert (every.n, opened.n) == (10, 8)
        assert every.raw_mean_pp == pytest.approx((8 * 0.0 + 2 * 20.0) / 10)  # none: the reading is the prediction
        assert opened.raw_mean_pp == pytest.approx(0.0) and opened.extrapolated_mean_pp == pytest.approx(0.0)
    assert sum(not r.raw_breach for r in rep.runs) == 8
