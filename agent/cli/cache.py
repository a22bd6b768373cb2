"""`agent cache ls|gc`: the content-addressed run cache (experience_bank/runcache.py).

Every trial, full run and evaluation is stored there by its content key and reused by any
later request of the same content (other episodes of `agent compare`, retrospective cells,
the seed bank, a resumed episode). Entries are never changed; `gc` removes them: those not
used for `--older-than` days, then the least recently used until `--max-gb` remains, or all
(`--all`). `--no-cache` on `agent run`, `compare`, `retrospective` and `world seed-bank`
turns the cache off for that command (AGENT_NO_CACHE=1).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json

from agent.inputs import check_out_dir
from experience_bank.errors import BadInput
from experience_bank.runcache import RunCache, default_root

EXAMPLES = """examples:
  agent cache ls
  agent cache gc --older-than 30
  agent cache gc --max-gb 20
  agent cache gc --all
"""


MAX_DAYS = 36500.0
"""--older-than beyond a century removes nothing (no entry is that old); past ~1e303 days the
seconds overflow to inf."""
MAX_GB = 1e6
"""--max-gb beyond a petabyte keeps everything; past ~1e299 GB the byte count overflows."""


def _in_range(flag: str, value: float | None, most: float, example: str) -> None:
    # float() accepts nan and inf: nan fails every comparison (a gc that silently removes nothing),
    # inf and huge values overflow the conversion to seconds or bytes.
    if value is not None and not 0 <= value <= most:
        raise BadInput(f"{flag} {value:g} is not a number from 0 to {most:,.0f}: give e.g. {flag} {example}")


def register(sub) -> None:
    cache = sub.add_parser("cache", help="the run cache: list or garbage-collect stored runs and evaluations")
    csub = cache.add_subparsers(dest="cache_command", required=True, metavar="COMMAND")
    ls = csub.add_parser("ls", help="stored entries (kind, key, size, last use)", epilog=EXAMPLES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    ls.add_argument("--json", action="store_true", help="one JSON object per entry, as a list")
    ls.set_defaults(func=cmd_ls)
    gc = csub.add_parser("gc", help="remove old or least recently used entries", epilog=EXAMPLES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    gc.add_argument("--older-than", type=float, default=None, metavar="DAYS", help="entries unused for DAYS days")
    gc.add_argument("--max-gb", type=float, default=None, metavar="GB", help="then least recently used down to GB")
    gc.add_argument("--all", action="store_true", help="every entry")
    gc.set_defaults(func=cmd_gc)


def _cache() -> RunCache:
    """The cache at AGENT_RUN_CACHE / AGENT_CACHE; a root that is (or lies under) a regular file
    would list nothing and remove nothing, which reads as an empty cache: refused instead. A root
    that does not exist yet is an empty cache."""
    root = default_root()
    try:
        check_out_dir(root, "run cache root")
    except BadInput as exc:
        raise BadInput(f"{exc} (point AGENT_RUN_CACHE or AGENT_CACHE at a directory)") from None
    return RunCache(root)


def cmd_ls(args) -> int:
    cache = _cache()
    rows = []
    for e in cache.entries():
        used = (e.path / "entry.json").stat().st_mtime
        rows.append({"kind": e.kind, "key": e.sha, "bytes": e.size_bytes, "files": len(e.files),
                     "wall_seconds": e.wall_seconds, "created": e.created, "last_used": used})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{cache.root}: {len(rows)} entries, {sum(r['bytes'] for r in rows) / 1e6:.1f} MB, "
          f"{sum(r['wall_seconds'] for r in rows):.0f} s of compute stored")
    for r in rows:
        when = dt.datetime.fromtimestamp(r["last_used"]).strftime("%Y-%m-%d %H:%M")
        print(f"  {r['kind']:5s} {r['key'][:16]}  {r['bytes'] / 1e6:8.1f} MB  {r['wall_seconds']:8.1f} s  used {when}")
    return 0


def cmd_gc(args) -> int:
    if args.older_than is None and args.max_gb is None and not args.all:
        raise BadInput("agent cache gc needs --older-than DAYS, --max-gb GB or --all: say what to remove")
    _in_range("--older-than", args.older_than, MAX_DAYS, "30")
    _in_range("--max-gb", args.max_gb, MAX_GB, "20")
    done = _cache().gc(older_than_s=None if args.older_than is None else args.older_than * 86400,
                       max_bytes=None if args.max_gb is None else int(args.max_gb * 1e9), everything=args.all)
    print(f"removed {done['removed']} entries ({done['freed_bytes'] / 1e6:.1f} MB); kept {done['kept']} "
          f"({done['kept_bytes'] / 1e6:.1f} MB)")
    return 0
