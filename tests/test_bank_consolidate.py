"""Consolidation: provenance check, de-duplication with replicate upgrade, conflict review."""

import statistics

import pytest
from scipy import stats

from support.bank_factory import proposal, record, sha
from experience_bank.consolidate import lower_bound
from experience_bank.errors import BadInput


def _episode(bank, staged, base=(), episode="E1"):
    if base:
        bank.import_records(base, library_note="L0")
    bank.start_episode(episode, sha("m"), bank.current_library_version())
    for r in staged:
        bank.stage_observation(episode, r)
    bank.finish_episode(episode)
    return bank.consolidate(episode)


def test_agreeing_matched_replicates_upgrade_to_grade_a(mem_bank):
    version = _episode(mem_bank, [record(delta=7.0, seed=1), record(delta=6.0, seed=2)],
                       base=[record(delta=5.0, seed=0), proposal()])
    assert version == 1
    entries = {e.record.kind + e.record.card.id: e for e in mem_bank.library_records(version)}
    assert set(entries) == {"historicalS01", "proposalP01"}
    ev = entries["historicalS01"].record.evidence
    t = stats.t.ppf(0.95, 2)  # one-sided 95% (experience_bank.evidence)
    assert (ev.grade, ev.chi, ev.replicates) == ("A", 1, 3)
    assert ev.delta_point == pytest.approx(6.0)
    assert ev.delta_src == pytest.approx(6.0 - t * 1.0 / 3 ** 0.5) == pytest.approx(4.3141455392)
    members = mem_bank.db.execute("SELECT count(*) FROM replicates").fetchone()[0]
    assert members == 3
    assert len(mem_bank.library_records(0)) == 2  # earlier version unchanged


def test_consolidate_is_idempotent(mem_bank):
    v = _episode(mem_bank, [record(delta=7.0, seed=1)], base=[record(delta=5.0)])
    count = mem_bank.db.execute("SELECT count(*) FROM library_versions").fetchone()[0]
    assert mem_bank.consolidate("E1") == v
    assert mem_bank.db.execute("SELECT count(*) FROM library_versions").fetchone()[0] == count


def test_merged_record_is_rederived_from_members_next_episode(mem_bank):
    _episode(mem_bank, [record(delta=7.0, seed=1)], base=[record(delta=5.0)])
    v2 = _episode(mem_bank, [record(delta=9.0, seed=2)], episode="E2")
    (entry,) = mem_bank.library_records(v2)
    effects = [5.0, 7.0, 9.0]
    assert entry.record.evidence.replicates == 3  # not 2 + 1 double-counted
    assert entry.record.evidence.delta_src == pytest.approx(lower_bound(effects))
    assert entry.record.evidence.delta_point == pytest.approx(statistics.fmean(effects))


def test_log_only_duplicates_do_not_upgrade(mem_bank):
    v = _episode(mem_bank, [record(delta=4.0, grade="C", seed=1)], base=[record(delta=2.0, grade="C")])
    (entry,) = mem_bank.library_records(v)
    ev = entry.record.evidence
    assert (ev.grade, ev.chi, ev.replicates, ev.delta_src) == ("C", 0, 2, 3.0)


def test_contradicting_evidence_is_kept_and_flagged(mem_bank):
    v = _episode(mem_bank, [record(delta=-6.0, seed=1)], base=[record(delta=5.0), record("S02", delta=3.0)])
    entries = mem_bank.library_records(v)
    flags = sorted((e.record.card.id, e.record.evidence.delta_point, e.conflicted) for e in entries)
    assert flags == [("S01", -6.0, True), ("S01", 5.0, True), ("S02", 3.0, False)]


def test_noise_does_not_contradict(mem_bank):
    v = _episode(mem_bank, [record(delta=-0.5, seed=1)], base=[record(delta=5.0)])
    (entry,) = mem_bank.library_records(v)
    assert not entry.conflicted and entry.record.evidence.grade == "A"


def test_missing_artefacts_are_marked(tmp_path):
    from experience_bank.bank import Bank
    (tmp_path / "gens.jsonl").write_text("{}\n")
    with Bank.init(tmp_path / "b.sqlite") as bank:
        v = _episode(bank, [], base=[record(artefacts=("gens.jsonl", "lost/ckpt.safetensors"))])
        (entry,) = bank.library_records(v)
    assert entry.missing == ("lost/ckpt.safetensors",)


def test_consolidate_refuses_running_episode_and_tampered_record(mem_bank):
    mem_bank.import_records([record()], library_note="L0")
    mem_bank.start_episode("E1", sha("m"), 0)
    with pytest.raises(BadInput, match="still running"):
        mem_bank.consolidate("E1")
    mem_bank.finish_episode("E1")
    mem_bank.db.execute("DROP TRIGGER records_no_update")
    mem_bank.db.execute("UPDATE records SET body = replace(body, '5.0', '9.0')")
    with pytest.raises(BadInput, match="fails its hash check"):
        mem_bank.consolidate("E1")
    assert mem_bank.current_library_version() == 0
