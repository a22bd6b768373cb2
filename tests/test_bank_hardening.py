"""A bank used by a busy team and a hostile user (issue 31): consolidation over the newest library
version, paths the file system refuses, a verify beside a writer, and an endless JSONL line."""

from __future__ import annotations

import hashlib
import tracemalloc

import pytest

from agent.cli.main import main
from support.bank_factory import event, record, sha
from experience_bank import files, integrity, paths
from experience_bank.bank import Bank
from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json


def _cards(bank: Bank, version: int) -> list[str]:
    return sorted(e.record.card.id for e in bank.library_records(version))


# --- consolidation builds on the newest version -----------------------------------------------


def test_imports_and_another_episode_beside_an_episode_survive_its_consolidation(tmp_path):
    path = tmp_path / "bank.sqlite"
    with Bank.init(path) as mine, Bank.open(path) as team:  # two connections, as two processes hold
        mine.import_records([record("S01")], library_note="L0")
        mine.start_episode("E1", sha("m1"), 0)
        mine.stage_observation("E1", record("S01", seed=1, delta=6.0))
        # While E1 runs: a colleague imports 40 records and a second episode is consolidated.
        team.import_records([record(f"I{i:02d}") for i in range(40)], library_note="import during E1")
        team.start_episode("E2", sha("m2"), team.current_library_version())
        team.stage_observation("E2", record("X01", seed=2))
        team.finish_episode("E2")
        v2 = team.consolidate("E2")
        mine.finish_episode("E1")
        v3 = mine.consolidate("E1")
        assert (v2, v3) == (2, 3)
        cards = _cards(mine, v3)
        assert len(cards) == 42 and "X01" in cards and "I39" in cards and "S01" in cards
        (s01,) = [e.record for e in mine.library_records(v3) if e.record.card.id == "S01"]
        assert s01.evidence.replicates == 2  # E1's observation merged with L0's record
        base = mine.db.execute("SELECT base_version FROM library_versions WHERE version = 3").fetchone()[0]
        assert base == 2
        assert mine.verify() == []


def test_consolidating_twice_still_returns_its_version_after_the_library_moved(mem_bank):
    mem_bank.import_records([record("S01")], library_note="L0")
    mem_bank.start_episode("E1", sha("m"), 0)
    mem_bank.finish_episode("E1")
    v = mem_bank.consolidate("E1")
    mem_bank.import_records([record("S02")], library_note="later")
    assert mem_bank.consolidate("E1") == v == 1


# --- paths the file system refuses ------------------------------------------------------------

BAD_PATHS = {
    "a part over 255 bytes": "x" * 256,
    "a deep part over 255 bytes": "artefacts/" + "\u00e9" * 128,  # 256 bytes in UTF-8
    "a path over 1024 bytes": "/".join(["y" * 200] * 6),
    "absolute": "/etc/passwd",
    "climbs out": "artefacts/../../etc/passwd",
    "NUL": "a\x00b",
    "newline": "a\nb",
    "empty": "",
}


@pytest.mark.parametrize("name", sorted(BAD_PATHS))
def test_a_path_no_file_can_have_is_refused_at_import(tmp_path, capsys, name):
    bank_file = tmp_path / "bank.sqlite"
    assert main(["bank", "init", "--bank", str(bank_file)]) == 0
    before = hashlib.sha256(bank_file.read_bytes()).hexdigest()
    jsonl = tmp_path / "in.jsonl"
    bad = record("S02", artefacts=(BAD_PATHS[name],))
    jsonl.write_text(canonical_json(record("S01")) + "\n" + canonical_json(bad) + "\n", encoding="utf-8")
    assert main(["bank", "import", str(jsonl), "--bank", str(bank_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agent: error: ") and "line 2" in err and "artefact path" in err and "\n" not in err
    assert hashlib.sha256(bank_file.read_bytes()).hexdigest() == before
    with Bank.open(bank_file) as bank, pytest.raises(BadInput, match="artefact path"):
        bank.import_records([bad], library_note="direct")


def test_the_largest_allowed_path_imports_and_consolidates(tmp_path):
    ok = "a/" + "z" * 255
    assert paths.path_problem(ok) is None and paths.path_problem("z" * 256) is not None
    with Bank.init(tmp_path / "bank.sqlite") as bank:
        bank.import_records([record("S01", artefacts=(ok,))], library_note="L0")
        bank.start_episode("E1", sha("m"), 0)
        bank.finish_episode("E1")
        (entry,) = bank.library_records(bank.consolidate("E1"))
        assert entry.missing == (ok,)


def test_staged_observations_and_events_are_checked_too(mem_bank):
    mem_bank.start_episode("E1", sha("m"), 0)
    with pytest.raises(BadInput, match="observation of S01: artefact path"):
        mem_bank.stage_observation("E1", record("S01", artefacts=("x" * 300,)))
    bad = event().model_copy(update={"artefacts": ("/" + "q" * 10,)})
    with pytest.raises(BadInput, match="event 0: artefact path"):
        mem_bank.append_event(bad)
    assert mem_bank.events("E1") == [] and mem_bank.staged("E1") == []


def _old_bank_with(path, artefact: str, monkeypatch) -> None:
    """A bank written before the import checked paths: the frozen record names `artefact`."""
    with monkeypatch.context() as m:
        m.setattr(paths, "check_paths", lambda *a: None)
        with Bank.init(path) as bank:
            bank.import_records([record("S01", artefacts=(artefact,)), record("S02")], library_note="L0")
            bank.start_episode("E1", sha("m"), 0)
            bank.finish_episode("E1")


@pytest.mark.parametrize("artefact", [BAD_PATHS["a part over 255 bytes"], BAD_PATHS["NUL"],
                                      BAD_PATHS["absolute"]])
def test_a_stored_bad_path_is_absent_not_a_traceback(tmp_path, capsys, monkeypatch, artefact):
    bank_file = tmp_path / "bank.sqlite"
    _old_bank_with(bank_file, artefact, monkeypatch)
    assert main(["bank", "consolidate", "--episode", "E1", "--bank", str(bank_file)]) == 0
    assert "library version 1 (2 records)" in capsys.readouterr().out
    with Bank.open(bank_file) as bank:
        missing = {e.record.card.id: e.missing for e in bank.library_records(1)}
        assert missing == {"S01": (artefact,), "S02": ()}
        assert bank.verify() == []


@pytest.mark.slow  # 45 s (the report's figures); the consolidate node calls the Bank.consolidate above
def test_an_episode_over_a_bank_with_a_stored_bad_path_ends(tmp_path, monkeypatch):
    # The real loop (fakes only at the trainer and evaluator boundary) up to its consolidate node.
    from support import graph_fakes as tgf
    from agent.run.rundir import RunDir

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))
    with monkeypatch.context() as m:
        m.setattr(paths, "check_paths", lambda *a: None)
        with Bank.init(tmp_path / "run" / "bank.sqlite") as bank:
            bank.import_records([record("S01", seed="S01", artefacts=("x" * 300,))], library_note="old library")
    final = tgf.run_fake(tmp_path / "run", cards=("S01",))  # S01 is rejected: no training, a short episode
    assert final["stop_reason"] and RunDir(tmp_path / "run").finished()  # the report node ran
    with Bank.open(tmp_path / "run" / "bank.sqlite") as bank:
        assert bank.current_library_version() == 1
        assert ("x" * 300,) in [e.missing for e in bank.library_records(1)]


# --- verify reads one snapshot ---------------------------------------------------------------


def test_verify_beside_a_writer_reads_one_snapshot(tmp_path, monkeypatch, capsys):
    path = tmp_path / "bank.sqlite"
    with Bank.init(path) as bank:
        bank.import_records([record("S01")], library_note="L0")
        bank.start_episode("E1", sha("m"), 0)
        bank.append_event(event(seq=0))
    writer = Bank.open(path)
    real = integrity._journal_entries
    seqs = iter(range(1, 100))

    def journal_then_append(db, ep, start):
        # Another process appends an event between verify's read of the journal and of the events.
        found = real(db, ep, start)
        writer.append_event(event(seq=next(seqs)))
        return found

    monkeypatch.setattr(integrity, "_journal_entries", journal_then_append)
    try:
        for _ in range(3):
            assert main(["bank", "verify", "--bank", str(path)]) == 0
            assert "clean" in capsys.readouterr().err
    finally:
        writer.close()
    monkeypatch.undo()
    with Bank.open(path) as bank:
        assert len(bank.events("E1")) == 4 and bank.verify() == []


# --- a JSONL line is refused by its length while it is read -----------------------------------


def test_an_endless_jsonl_line_is_refused_by_length_with_bounded_memory(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 64 << 10)
    jsonl = tmp_path / "in.jsonl"
    with open(jsonl, "w", encoding="utf-8") as f:
        f.write(canonical_json(record("S01")) + "\n")
        f.write('{"kind": "historical", "card": "' + "a" * (8 << 20) + '"}\n')  # 8 MiB, one line
    with Bank.init(tmp_path / "bank.sqlite") as bank:
        tracemalloc.start()
        try:
            with pytest.raises(BadInput, match=r"line 2 is longer than 65536 bytes"):
                bank.import_jsonl(jsonl, library_note="x")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 2 << 20, peak  # the line is 8 MiB: it was never held whole
        assert bank.current_library_version() == 0 and bank.record_hashes() == []
    assert main(["bank", "import", str(jsonl), "--bank", str(tmp_path / "bank.sqlite")]) == 2
    err = capsys.readouterr().err.strip()
    assert "line 2 is longer than 65536 bytes" in err and "\n" not in err


def test_a_line_of_exactly_the_limit_is_read(tmp_path, monkeypatch):
    line = canonical_json(record("S01"))
    monkeypatch.setattr(files, "MAX_LINE_BYTES", len(line.encode()))
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(line + "\n" + line, encoding="utf-8")
    assert [n for n, _ in files.jsonl_text(jsonl, "records file")] == [1, 2]
    jsonl.write_text(line + " \n", encoding="utf-8")
    with pytest.raises(BadInput, match="line 1 is longer than"):
        list(files.jsonl_text(jsonl, "records file"))
