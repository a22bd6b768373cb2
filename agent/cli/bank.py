"""`agent bank ...`: thin commands over experience_bank.bank.Bank (see agent/cli.py)."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys

from agent.inputs import check_bank_file, check_jsonl, check_out_file
from experience_bank import heads, migrations
from experience_bank.bank import BUSY_TIMEOUT_S, Bank, damaged
from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.hashing import INT_BOUNDS

DEFAULT_BANK = "runs/bank.sqlite"


def cmd_init(args) -> int:
    with Bank.init(args.bank, wait_s=args.wait) as bank:
        print(f"bank {args.bank}: schema {bank.schema_version()}, library version {bank.current_library_version()}")
    return 0


def cmd_import(args) -> int:
    # The import is one transaction, so a bad line leaves a current bank as it was; but opening an
    # older bank migrates it first, so then the whole file is checked before (8.3 s of 1e6 lines).
    if migrations.would_migrate(args.bank):
        check_jsonl(args.file, "records file")
    with Bank.open(args.bank, wait_s=args.wait) as bank:
        hashes = bank.import_jsonl(args.file, library_note=f"import {args.file}")
        print(f"imported {len(hashes)} records; library version {bank.current_library_version()}")
    return 0


def _check_version(version: int | None) -> None:
    """--version reaches SQLite as a parameter, and sqlite3 raises OverflowError past its 64-bit
    INTEGER; a version inside that range but not in the bank is the bank's own refusal."""
    lo, hi = INT_BOUNDS
    if version is not None and not lo <= version <= hi:
        digits = str(version)
        shown = digits if len(digits) <= 20 else f"{digits[:20]}... ({len(digits)} digits)"
        raise BadInput(f"--version {shown} does not fit in 64 bits: give an existing library version, "
                       "e.g. --version 0")


def cmd_export(args) -> int:
    _check_version(args.version)
    if args.out:
        check_out_file(args.out)
    with Bank.open(args.bank) as bank:
        if not args.out:
            for line in bank.export_lines(args.version):
                sys.stdout.write(line + "\n")
            return 0
        text = "".join(line + "\n" for line in bank.export_lines(args.version))
    write_atomic(args.out, text)  # whole or not at all: a failed hash check leaves no partial file
    return 0


def cmd_list(args) -> int:
    _check_version(args.version)
    with Bank.open(args.bank) as bank:
        for e in bank.library_records(args.version):
            grade = e.record.evidence.grade if e.record.kind == "historical" else "-"
            flag = " CONFLICTED" if e.conflicted else ""
            print(f"{e.hash[:12]}  {e.record.kind:10s} {e.record.card.id:16s} grade {grade}{flag}")
    return 0


def cmd_show(args) -> int:
    with Bank.open(args.bank) as bank:
        found = bank.records_for(args.id) or [(h, bank.get_record(h)) for h in bank.record_hashes()
                                              if h.startswith(args.id)]
    if not found:
        raise BadInput(f"no record with card id or hash prefix {args.id!r} in {args.bank}: "
                       f"list its records with `agent bank list --bank {args.bank}`")
    for h, record in found:
        print(json.dumps({"hash": h, "record": record.model_dump(mode="json")}, indent=2, ensure_ascii=False))
    return 0


def cmd_verify(args) -> int:
    beside = heads.log_path(args.bank)
    against = args.against or (str(beside) if beside.is_file() else None)
    with Bank.open(args.bank) as bank:
        report = bank.check(against, deep=args.deep)
    for line in report.problems:
        print(line)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    checked = f" against {against}" if against else ""
    print(f"bank verified{checked}: clean" if not report.problems else f"TAMPERED: {len(report.problems)} problem(s)",
          file=sys.stderr)
    return 1 if report.problems else 0


def cmd_head(args) -> int:
    with Bank.open(args.bank) as bank:
        for line in bank.head_lines():
            print(json.dumps(line, sort_keys=True))
    return 0


def cmd_consolidate(args) -> int:
    with Bank.open(args.bank, wait_s=args.wait) as bank:
        version = bank.consolidate(args.episode)
        print(f"episode {args.episode} -> library version {version} ({len(bank.library_records(version))} records)")
    return 0


def _bank_checked(func):
    """An existing --bank must be an SQLite file before Bank opens (and would migrate) it."""
    def checked(args) -> int:
        check_bank_file(args.bank)
        try:
            return func(args)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # busy, full or damaged after opening: one line
            raise damaged(args.bank, exc, getattr(args, "wait", BUSY_TIMEOUT_S)) from None
    return checked


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from 0 to 86400")
    return value


def _command(group, name: str, func, example: str, help_text: str, writes: bool = False) -> argparse.ArgumentParser:
    p = group.add_parser(name, help=help_text, description=f"{help_text}\n\nexample: {example}",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bank", default=DEFAULT_BANK, help=f"bank file (default {DEFAULT_BANK})")
    if writes:
        p.add_argument("--wait", type=_seconds, default=BUSY_TIMEOUT_S, metavar="SECONDS",
                       help=f"how long to wait for another process's write to the bank (default {BUSY_TIMEOUT_S:g})")
    p.set_defaults(func=_bank_checked(func))
    return p


def register(sub) -> None:
    """Add `agent bank init|import|export|list|show|verify|head|consolidate`."""
    bank = sub.add_parser("bank", help="the experience bank: records, library versions, histories")
    group = bank.add_subparsers(dest="bank_command", required=True, metavar="BANK_COMMAND")
    _command(group, "init", cmd_init, "agent bank init --bank runs/bank.sqlite", "create a bank (idempotent)", writes=True)
    _command(group, "import", cmd_import, "agent bank import records.jsonl",
             "import a JSONL file of records all or nothing, as a new library version", writes=True).add_argument("file")
    p = _command(group, "export", cmd_export, "agent bank export --version 0 --out library.jsonl",
                 "write a library version's records as JSONL")
    p.add_argument("--version", type=int, default=None, help="library version (default: current)")
    p.add_argument("--out", default=None, help="output file (default: stdout)")
    p = _command(group, "list", cmd_list, "agent bank list --version 1", "list a library version's records")
    p.add_argument("--version", type=int, default=None, help="library version (default: current)")
    _command(group, "show", cmd_show, "agent bank show S03", "show records by card id or hash prefix").add_argument("id")
    p = _command(group, "verify", cmd_verify, "agent bank verify --against runs/bank.sqlite.heads",
                 "recompute every hash and chain link; exit 1 naming the first broken row")
    p.add_argument("--against", default=None,
                   help="head log to check the history against (default: <bank>.heads when it exists)")
    p.add_argument("--deep", action="store_true", help="also re-parse every body through its typed record")
    _command(group, "head", cmd_head, "agent bank head > heads-copy.jsonl",
             "print the current head of the library chain and of every episode's journal")
    _command(group, "consolidate", cmd_consolidate, "agent bank consolidate --episode E1",
             "build the next library version from a finished episode", writes=True).add_argument("--episode", required=True)
