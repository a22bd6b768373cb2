"""A retrospective's results directory: finished seeds survive the machine, and only count in a
table measured on the same world, catalogue, rules and code (agent/experiments/retro_results.py)."""

from __future__ import annotations

import json

import pytest

from support import bank_factory as bf
from test_retrospective import Card, FakePorts, _controls
from agent.experiments import retro_results as RR
from agent.experiments import retrospective as R
from experience_bank.errors import BadInput
from experience_bank.records import CurrentContext
from experience_bank.decisions import Features


def _context() -> CurrentContext:
    src = bf.source()
    return CurrentContext(parent=src.parent, stage=0, families=("sql",), tasks={"sql": "sql/target"},
                          datasets=dict(src.datasets), runtimes=("trl-sft",), eval_protocol=src.eval_protocol,
                          output_protocols={"sql": "sql"})


LEDGER = {"kind": "retrospective", "world": "fake-0", "world_seed": 0, "base_sha256": "b" * 64,
          "catalogue_sha256": "c" * 64, "fractions": (0.05, 0.1, 0.2), "min_effect_pp": 1.0,
          "ifeval_drop_pp": 2.0, "eval_n": (200, 200), "control": "fake", "code": {"cell": "c"}}


def _table(tmp_path, out, results, seeds=(0,)):
    """Frozen features and decisions (BCIT's, from real records), then the cells on fake ports."""
    base = tmp_path / "base"
    base.mkdir(exist_ok=True)
    (base / "scores.json").write_text(json.dumps({"target": 30.0, "prompt_strict": 70.0, "inst_strict": 80.0}))
    cards = [Card("S01", "finance", "sft"), Card("G01", "sql", "grpo")]
    ctx = _context()
    records = {c.id: bf.record(c.id) for c in cards}
    out.mkdir(parents=True, exist_ok=True)
    frozen = RR.frozen_inputs(out, [c.id for c in cards])
    if frozen is None:
        hashes = R.freeze_decisions(out, [(c, records[c.id]) for c in cards], ctx)
        entries = [json.loads(x) for x in (out / "decisions.jsonl").read_text().splitlines()]
        feats = {e["decision"]["candidate_id"]: Features.model_validate_json(json.dumps(e["decision"]["features"]))
                 for e in entries}
    else:
        feats, hashes = frozen
    R.freeze_features(out, [(c.id, feats[c.id]) for c in cards])
    (out / "ledger.json").write_text(json.dumps(LEDGER))
    ports = FakePorts()
    res = R.run_table(out, cards, lambda: ports, str(base), list(seeds), feats, hashes, controls=_controls(cards),
                      parent=bf.record().source.parent, results=results)
    RR.publish_table(out, results)
    return ports, res


def test_finished_seeds_move_to_another_machine_and_are_not_run_again(tmp_path):
    results = tmp_path / "docs" / "retro-w0"
    ports, res = _table(tmp_path, tmp_path / "machine1", results)
    assert res["cells_done"] == 2 and len(ports.trained) > 0
    kept = sorted(p.relative_to(results).as_posix() for p in results.rglob("cell.json"))
    assert kept == ["cells/G01/cell.json", "cells/G01/s0/cell.json", "cells/S01/cell.json", "cells/S01/s0/cell.json"]
    # beside each finished seed, the machine that ran it (this one)
    from agent.world.embedded import native_env
    here = native_env()
    assert json.loads((results / "cells" / "G01" / "s0" / "machine.json").read_text()) == {
        "cpu": here.cpu, "machine": here.machine, "numerics": here.numerics}
    assert {p.name for p in results.iterdir()} >= {"ledger.json", "features.jsonl", "decisions.jsonl", "outcomes.jsonl"}

    # another machine: an empty run directory takes the two seeds and the frozen inputs
    out2 = tmp_path / "machine2"
    assert RR.take(results, out2, LEDGER) == 2
    feats, hashes = RR.frozen_inputs(out2, ["S01", "G01"])
    first = [json.loads(x)["decision"]["decision_hash"] for x in (results / "decisions.jsonl").read_text().splitlines()]
    assert [hashes["S01"], hashes["G01"]] == first
    ports2, res2 = _table(tmp_path, out2, results)
    assert ports2.trained == [] and res2["cells_done"] == 2  # nothing trained again
    assert (out2 / "cells" / "S01" / "cell.json").read_text() == (results / "cells" / "S01" / "cell.json").read_text()
    # a second seed runs (only its own runs), and is kept beside the first
    ports3, res3 = _table(tmp_path, out2, results, seeds=(0, 1))
    assert ports3.trained and all(res3["summary"]) and (results / "cells" / "S01" / "s1" / "cell.json").is_file()
    assert json.loads((results / "cells" / "S01" / "cell.json").read_text())["seeds"] == [0, 1]
    assert RR.take(results, tmp_path / "machine3", LEDGER) == 4


def test_another_measurement_is_refused_with_the_fields_that_differ(tmp_path):
    results = tmp_path / "results"
    _table(tmp_path, tmp_path / "m1", results)
    other = {**LEDGER, "base_sha256": "d" * 64, "code": {"cell": "c2"}}
    with pytest.raises(BadInput, match="base_sha256, code differ"):
        RR.take(results, tmp_path / "m2", other)
    assert not (tmp_path / "m2").exists()  # nothing taken
    assert RR.mismatch(json.loads((results / "ledger.json").read_text()), LEDGER) == []  # tuples compare as JSON


def test_a_run_directory_holding_other_numbers_is_never_overwritten(tmp_path):
    results = tmp_path / "results"
    _table(tmp_path, tmp_path / "m1", results)
    out = tmp_path / "m2"
    seed = out / "cells" / "S01" / "s0" / "cell.json"
    seed.parent.mkdir(parents=True)
    seed.write_text('{"id": "S01", "seed": 0, "other": true}')
    with pytest.raises(BadInput, match="differs from"):
        RR.take(results, out, LEDGER)
    assert json.loads(seed.read_text())["other"] is True


def test_a_misplaced_or_corrupt_published_cell_is_refused(tmp_path):
    results = tmp_path / "results"
    _table(tmp_path, tmp_path / "m1", results)
    (results / "cells" / "S01" / "s0" / "cell.json").write_text("{not json")
    with pytest.raises(BadInput, match="does not name the cell and seed"):
        RR.take(results, tmp_path / "m2", LEDGER)
    (results / "ledger.json").write_text("[1, 2]")
    with pytest.raises(BadInput, match="not a retrospective ledger"):
        RR.take(results, tmp_path / "m3", LEDGER)


def test_a_tampered_decision_ledger_is_not_used(tmp_path):
    results = tmp_path / "results"
    _table(tmp_path, tmp_path / "m1", results)
    path = results / "decisions.jsonl"
    lines = path.read_text().splitlines()
    entry = json.loads(lines[0])
    entry["decision"]["action"] = "train" if entry["decision"]["action"] != "train" else "reject"
    path.write_text("\n".join([json.dumps(entry, sort_keys=True)] + lines[1:]) + "\n")
    out = tmp_path / "m2"
    RR.take(results, out, LEDGER)
    with pytest.raises(BadInput, match="does not verify"):
        RR.frozen_inputs(out, ["S01", "G01"])


def test_code_version_is_the_cell_code_and_the_libraries(tmp_path, monkeypatch):
    v = RR.code_version()
    assert set(v) == {"cell", "libraries"} and len(v["cell"]) == 64 and v["libraries"]["trl"]
    seen = []
    monkeypatch.setattr(RR, "source_version", lambda parts, exclude=(): seen.extend(parts) or "x")
    RR.code_version()
    assert {"trainers", "evaluators", "agent/experiments/retro_run.py"} <= set(seen)
    # cards enter through the catalogue's hash; events and bank records never touch a run
    assert not {"experience_bank/frozen.py", "experience_bank/cards.py", "experience_bank/records.py"} & set(seen)


def test_a_run_directory_of_another_measurement_is_refused_before_anything_is_written(tmp_path):
    """A table's cells cache their steps by card id and seed: rerun into the same --out with another
    catalogue, the new card would be served the old card's runs."""
    from test_catalogue import fake_world

    out = tmp_path / "retro"
    out.mkdir()
    old = {**LEDGER, "catalogue_sha256": "0" * 64}
    text = json.dumps(old)
    (out / "ledger.json").write_text(text)
    with pytest.raises(BadInput, match=r"another world, catalogue, rule or code \(.*catalogue_sha256.*\).*new --out"):
        R.retrospective(out, size="default", world=fake_world(), seeds=1,
                        make_ports=lambda: pytest.fail("a cell ran"))
    assert (out / "ledger.json").read_text() == text and [p.name for p in out.iterdir()] == ["ledger.json"]


def test_a_results_path_under_a_file_is_refused_before_the_world_is_built(tmp_path, monkeypatch):
    """--results is written only as cells finish, hours in: a path that can never be a directory is
    refused first, before the world, the seed bank or any cell."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("kept\n")
    monkeypatch.setattr(R, "ensure_world", lambda *a, **k: pytest.fail("the world was built"))
    for results in (blocker, blocker / "retro-w0"):
        with pytest.raises(BadInput, match=r"notes.txt is a file, not a directory") as exc:
            R.retrospective(tmp_path / "retro", size="default", seeds=1, results=results,
                            make_ports=lambda: pytest.fail("a cell ran"))
        assert "\n" not in str(exc.value)
    assert blocker.read_text() == "kept\n" and not (tmp_path / "retro").exists()


def test_compiling_the_seed_bank_for_a_table_prints_its_progress(tmp_path, monkeypatch, capsys):
    """A new world's seed bank takes up to half an hour before the first cell: the table says so."""
    from test_catalogue import fake_world

    world = fake_world()
    cards = [c for c in R.catalogue(world) if c.id in ("S01", "G01")]

    def seed_records(w, progress=None, *, cards):  # the seed bank's boundary: its runs are trained elsewhere
        for i, cid in enumerate(cards, 1):
            progress(f"{cid} seed 0", i, len(cards))
        return [bf.record(cid) for cid in cards]

    monkeypatch.setattr(R, "seed_records", seed_records)
    features, hashes = R.frozen_or_compiled(tmp_path, world, cards)
    assert set(features) == set(hashes) == {"S01", "G01"}
    out = capsys.readouterr().out
    assert "seed bank: S01 seed 0 1/2" in out and "seed bank: G01 seed 0 2/2" in out
