"""agent retrospective: outcome classes, ShortFull diagnostics (hand-checked), the cell runner on fakes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import bank_factory as bf
from agent.experiments import retro_cells as RC
from agent.experiments import retrospective as R
from experience_bank.hashing import content_hash
from experience_bank.decisions import FieldScores
from policies.features import assemble


def test_outcome_class_and_direction():
    assert RC.outcome_class(3.0, {"prompt_strict": -1.0, "inst_strict": 0.0}) == "beneficial"
    assert RC.outcome_class(3.0, {"prompt_strict": -2.5, "inst_strict": 0.0}) == "harmful"  # no gain compensates
    assert RC.outcome_class(-1.0, {"prompt_strict": 0.0, "inst_strict": 0.0}) == "harmful"
    assert RC.outcome_class(0.5, {"prompt_strict": -2.0, "inst_strict": 0.0}) == "neutral"  # -2.0 is within the bound
    assert [RC.direction(d) for d in (1.0, 0.99, -0.99, -1.0)] == ["up", "flat", "flat", "down"]


def _cell(cid, family, method, short20, full, ife=0.0, verdict="inconclusive", wall=(2.0, 10.0)):
    short = {f"{f:.2f}": {"target": short20, "ifeval": {"prompt_strict": 0.0, "inst_strict": 0.0}, "wall_s": wall[0]}
             for f in R.FRACTIONS}
    short["0.05"]["target"] = -short20  # the shortest run always disagrees in these cells
    ifeval = {"prompt_strict": ife, "inst_strict": 0.0}
    return {"id": cid, "family": family, "method": method, "short": short, "trial_verdict": verdict,
            "full": {"target": full, "ifeval": ifeval, "wall_s": wall[1]}, "outcome_class": RC.outcome_class(full, ifeval)}


def test_summarise_cells_hand_checked():
    cells = [_cell("S01", "finance", "sft", 2.0, 3.0, verdict="pass"),          # TP
             _cell("S02", "finance", "sft", 2.0, 4.0, ife=-5.0, verdict="pass"),  # FP: harmful on IFEval
             _cell("G01", "sql", "grpo", -2.0, 2.0),                              # FN, sign reversal
             _cell("G02", "sql", "grpo", 0.0, 0.0),                               # TN, flat/flat
             _cell("S03", "function", "sft", -3.0, -4.0, verdict="fail")]         # TN
    s = RC.summarise_cells(cells)
    assert s["direction_counts"] == {"positive": 3, "neutral": 1, "negative": 1}
    assert s["by_family"]["finance"] == {"up": 2, "flat": 0, "down": 0}
    assert s["retention_safe_among_improving"] == "2/3"
    sf = s["shortfull"]
    assert sf["confusion"] == {"tp": 1, "fp": 1, "fn": 1, "tn": 2}
    assert sf["pass_precision"] == 0.5 and sf["pass_recall"] == 0.5
    assert sf["agreement"] == pytest.approx(4 / 5)  # all but G01
    assert sf["budget_sensitivity"]["0.05"]["agree"] == 2  # flat G02, and G01 whose negated 5% run is +2
    assert sf["sign_reversals"] == ["G01"]
    assert sf["median_trial_cost_ratio"] == pytest.approx(0.2)
    lo, hi = sf["agreement_ci"]
    assert lo == pytest.approx(0.2836, abs=1e-3) and hi == pytest.approx(0.9949, abs=1e-3)


@dataclass(frozen=True)
class Steps:
    steps: int = 100


@dataclass(frozen=True)
class Adapter:
    kind: str = "full"


@dataclass(frozen=True)
class HParams:
    learning_rate: float = 1e-4


@dataclass(frozen=True)
class Card:
    id: str
    family: str
    method: str
    budget: Steps = Steps()
    adapter: Adapter = Adapter()
    hparams: HParams = HParams()


class FakePorts:
    """A model is a directory with scores.json; training adds a planned change scaled by fraction.
    The matched control (fine-tuning without the intervention) gains 1 pp on the target and
    loses 0.5 pp of IFEval prompt strict: effects are measured against it, not the parent."""

    PLAN = {"S01": (4.0, -1.0), "G01": (-3.0, 0.0), "CTRL-sft": (1.0, -0.5), "CTRL-grpo": (1.0, -0.5)}

    def __init__(self):
        self.trained = []

    def evaluate(self, model_dir, family, split, out_dir):
        return json.loads((Path(model_dir) / "scores.json").read_text())

    def train(self, card, parent_dir, fraction, seed, out_dir, snapshots=()):
        if card.id == "BAD":
            raise RuntimeError("trainer crashed")
        self.trained.append((card.id, fraction))
        return self.write(card, parent_dir, fraction, out_dir, self.PLAN[card.id], snapshots)

    @staticmethod
    def write(card, parent_dir, fraction, out_dir, plan, snapshots, sanity=()):
        """The run's model (and one per snapshot): the planned change scaled by its share."""
        gain, ife = plan
        base = json.loads((Path(parent_dir) / "scores.json").read_text())

        def model(share, where):
            Path(where).mkdir(parents=True, exist_ok=True)
            child = {"target": base["target"] + gain * share, "prompt_strict": base["prompt_strict"] + ife * share,
                     "inst_strict": base["inst_strict"]}
            (Path(where) / "scores.json").write_text(json.dumps(child))
        model(fraction, out_dir)
        for share, step in snapshots:
            model(share, f"{out_dir}/curve/step-{step}")
        return {"checkpoint": out_dir, "wall_s": 100.0 * fraction, "sanity_failures": list(sanity),
                "snapshots": [{"fraction": share, "step": step, "path": f"{out_dir}/curve/step-{step}"}
                              for share, step in snapshots]}


def _features(cid):
    fs = FieldScores(family=1.0, data=1.0, runtime=1.0, parent=1.0, protocol=1.0)
    return assemble(candidate_id=cid, record_hash="a" * 64, context_hash="b" * 64, fields=fs, conflicts=(),
                    nu="continue", grade="B", delta_src=5.0, kappa=10.0)


def _controls(cards):
    # real cards, since control_key hashes their content; the two methods' controls differ in data size
    return {c.id: bf.card(f"CTRL-{c.method}", n_examples=100 if c.method == "sft" else 32) for c in cards}


def test_run_table_on_fakes_resumes_and_isolates_a_failing_cell(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "scores.json").write_text(json.dumps({"target": 30.0, "prompt_strict": 70.0, "inst_strict": 80.0}))
    cards = [Card("S01", "finance", "sft"), Card("BAD", "sql", "sft"), Card("G01", "sql", "grpo")]
    feats = {c.id: _features(c.id) for c in cards}
    out = tmp_path / "retro"
    sha = R.freeze_features(out, [(c.id, feats[c.id]) for c in cards])
    ports = FakePorts()
    parent = bf.record().source.parent
    said: list[str] = []
    res = R.run_table(out, cards, lambda: ports, str(base), [0], feats, {c.id: content_hash(c.id) for c in cards},
                      controls=_controls(cards), parent=parent, say=said.append)
    assert res["cells_done"] == 2 and list(res["failed"]) == ["BAD"]
    # progress: the plan, then each cell seed as it ends, in order here (one after another)
    assert said[0] == f"{out}: 3 cell seeds, 0 finished before, 3 to run"
    assert [x.split(" ended ")[1].split(";")[0] for x in said[1:]] == [
        "(S01 seed 0: done)", "(BAD seed 0: failed (RuntimeError: trainer crashed))", "(G01 seed 0: done)"]
    s01 = json.loads((out / "cells" / "S01" / "cell.json").read_text())
    # intervention minus trained control: 4 - 1 on the target, -1 - (-0.5) on IFEval prompt strict
    assert s01["full"]["target"] == pytest.approx(3.0) and s01["short"]["0.20"]["target"] == pytest.approx(0.6)
    assert s01["full"]["ifeval"]["prompt_strict"] == pytest.approx(-0.5)
    assert s01["control"]["1.00"]["target"] == pytest.approx(31.0)
    # the parent's own scores, beside the control's: a loop's trial reads against the parent
    assert s01["parent"]["validation"] == s01["parent"]["adoption"] == {"target": 30.0, "prompt_strict": 70.0,
                                                                        "inst_strict": 80.0}
    assert s01["trial_verdict"] == "inconclusive" and s01["outcome_class"] == "beneficial"
    g01 = json.loads((out / "cells" / "G01" / "cell.json").read_text())
    assert g01["outcome_class"] == "harmful" and g01["trial_verdict"] == "inconclusive"  # -0.8 pp at 20%
    # one control run per (method, length), shared by every cell that matches it: S01's sft control
    # and G01's grpo control, each a trial-length run (its 5 and 10 % readings are snapshots of it)
    # and a full run (BAD crashed before its control ran); the cells' own runs likewise
    assert sorted(c for c, _ in ports.trained if c.startswith("CTRL")) == ["CTRL-grpo"] * 2 + ["CTRL-sft"] * 2
    assert sorted((c, f) for c, f in ports.trained if c == "S01") == [("S01", 0.2), ("S01", 1.0)]
    assert s01["short"]["0.05"]["target"] == pytest.approx(0.15) and s01["short"]["0.05"]["wall_s"] == 5.0
    lines = [json.loads(x) for x in (out / "cells.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["S01", "G01"] and lines[0]["features"]["candidate_id"] == "S01"
    from policies.decision_ledger import OutcomeCell
    cells = [OutcomeCell.model_validate_json(x) for x in (out / "outcomes.jsonl").read_text().splitlines()]
    assert [(c.candidate_id, c.outcome, c.full["target"]) for c in cells] == [("S01", "beneficial", 3.0),
                                                                               ("G01", "harmful", -4.0)]
    # resume: finished cells are not trained again; the frozen features are unchanged
    n = len(ports.trained)
    said.clear()
    R.run_table(out, cards, lambda: ports, str(base), [0], feats, controls=_controls(cards), parent=parent,
                say=said.append)
    assert len(ports.trained) == n
    assert said[0] == f"{out}: 3 cell seeds, 2 finished before, 1 to run" and len(said) == 2  # BAD, again
    assert R.freeze_features(out, [(c.id, feats[c.id]) for c in cards]) == sha
    # the document: this table's numbers beside the paper's, from the files above
    from agent.experiments.retro_summary import write_summary

    (out / "ledger.json").write_text(json.dumps({"world": "fake-0", "seed": 0, "features_sha256": sha,
                                                 "control": "fake control"}))
    doc = write_summary(out)
    md = (out / "retrospective.md").read_text()
    assert doc["table"]["direction_counts"] == {"positive": 1, "neutral": 0, "negative": 1}
    assert doc["compatibility_stage0"]["A"] == {"1": 3} and doc["compatibility_stage0"]["H"] == 0
    assert "| finance | 1 | 0 | 0 |" in md and "| sql | 0 | 0 | 1 |" in md and "Failed: 1" not in md
    assert "direction counts 11 / 3 / 10" in md  # the paper's, recomputed from the shipped cells


def test_cli_needs_execute(capsys):
    from agent.cli.main import main

    assert main(["retrospective"]) == 2
    assert "--execute" in capsys.readouterr().err


@pytest.mark.slow
def test_retrospective_two_cells_on_the_test_world(tmp_path, monkeypatch):
    results = tmp_path / "published"
    res = R.retrospective(tmp_path / "retro", size="test", n_cells=2, seeds=1,  # seeds: test_retrospective_seeds.py
                          results=results)
    assert res["cells_done"] == 2, res["failed"]
    # another machine with the same world and code: every seed and the frozen inputs come from the
    # results directory; no seed bank and no run
    monkeypatch.setattr(R, "seed_records", lambda *a, **k: pytest.fail("the seed bank was read again"))
    monkeypatch.setattr(R, "run_cell", lambda *a, **k: pytest.fail("a finished cell ran again"))
    again = R.retrospective(tmp_path / "elsewhere", size="test", n_cells=2, seeds=1, results=results)
    assert again["summary"] == res["summary"]
    assert (tmp_path / "elsewhere" / "outcomes.jsonl").read_text() == (tmp_path / "retro" / "outcomes.jsonl").read_text()
    assert json.loads((tmp_path / "retro" / "ledger.json").read_text())["seeds"] == [0]
    for line in (tmp_path / "retro" / "cells.jsonl").read_text().splitlines():
        cell = json.loads(line)
        assert cell["outcome_class"] in ("beneficial", "harmful", "neutral")
        assert set(cell["short"]) == {"0.05", "0.10", "0.20"}
        assert set(cell["control"]) == {"0.05", "0.10", "0.20", "1.00"}  # a trained control at every length
    # both cells are SFT cards of one family: they share each control run (the trial-length run,
    # read at its snapshots too, and the full run)
    assert len(list((tmp_path / "retro" / "controls").iterdir())) == 2
    md = (tmp_path / "retro" / "retrospective.md").read_text()
    assert "Retrospective-24, executed on world test-" in md and "| bcit |" in md
