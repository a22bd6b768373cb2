"""Seeded random single-byte flips in a small bank file: `verify` never crashes, and it never
says clean while the bank's API would return different data (issue 15 §1)."""

import random
import sqlite3

from test_bank_tamper import build

from experience_bank import heads
from experience_bank.bank import Bank
from experience_bank.errors import BadInput

FLIPS = 400


def snapshot(bank: Bank) -> object:
    """Everything the loop, the audit and the CLI read through the API."""
    versions = range(bank.current_library_version() + 1)
    episodes = [e for (e,) in bank.db.execute("SELECT episode_id FROM episodes ORDER BY rowid").fetchall()]
    return (
        [[(e.hash, e.record, e.conflicted, e.missing) for e in bank.library_records(v)] for v in versions],
        [(bank.events(e), bank.staged(e)) for e in episodes],
        [bank.records_for(card) for card in ("S01", "S02", "S03")],
        [bank.get_record(h) for h in bank.record_hashes()],
        bank.head_lines(),
    )


def _read(path):
    """('refused', message) when opening or reading it fails with one line, else ('data', snapshot)."""
    try:
        with Bank.open(path) as bank:
            return "data", snapshot(bank)
    except (BadInput, sqlite3.DatabaseError) as exc:
        return "refused", str(exc)


def test_single_byte_flips_are_reported_or_harmless(tmp_path):
    path = tmp_path / "b.sqlite"
    build(path)  # closed: the WAL is checkpointed into the file
    original = path.read_bytes()
    log = heads.log_path(path)
    with Bank.open(path) as bank:
        truth = snapshot(bank)
    rng = random.Random(20261201)
    used = [i for i, byte in enumerate(original) if byte]  # zero bytes are mostly free space: aim at data
    outcome = {"reported": 0, "harmless": 0, "refused at open": 0}
    for _ in range(FLIPS):
        at = rng.choice(used)
        flipped = bytearray(original)
        flipped[at] ^= 1 << rng.randrange(8)
        target = tmp_path / "flip.sqlite"
        for leftover in (target, tmp_path / "flip.sqlite-wal", tmp_path / "flip.sqlite-shm"):
            leftover.unlink(missing_ok=True)
        target.write_bytes(bytes(flipped))
        try:
            bank = Bank.open(target)
        except BadInput:
            outcome["refused at open"] += 1
            continue
        with bank:
            problems = bank.verify(against=log)  # must not raise, whatever the byte
        if problems:
            outcome["reported"] += 1
            continue
        kind, seen = _read(target)
        assert kind == "data" and seen == truth, f"byte {at}: verify said clean but the API reads {kind}"
        outcome["harmless"] += 1
    assert outcome["reported"] + outcome["refused at open"] >= FLIPS // 4, outcome
