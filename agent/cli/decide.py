"""`agent authorize`, `agent audit`, `agent replay`: thin commands over policies/.

Examples:
    agent authorize --bank bank.db --context ctx.json --policy bcit --json
    agent authorize --features features.jsonl --policy flat_additive --json
    agent audit runs/E1 --json
    agent replay retrospective-24 --json --out replay/
"""

from __future__ import annotations

import json
from pathlib import Path

from experience_bank.errors import BadInput


def register(sub) -> None:
    """Add authorize, audit and replay to the `agent` parser."""
    p = sub.add_parser("authorize", help="authorize candidates (e.g. agent authorize --features f.jsonl --policy bcit --json)")
    p.add_argument("--bank", help="bank whose current library is authorized")
    p.add_argument("--context", help="current context JSON (with --bank)")
    p.add_argument("--features", help="JSONL of feature rows (instead of --bank/--context)")
    p.add_argument("--policy", default="bcit", help="policy name (default bcit)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_authorize)
    a = sub.add_parser("audit", help="verify a decision ledger and score it (e.g. agent audit runs/E1 --json)")
    a.add_argument("path", help="episode directory (decisions.jsonl [+ outcomes.jsonl]) or a ledger file")
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.set_defaults(func=cmd_audit)
    r = sub.add_parser("replay", help="replay published diagnostics (e.g. agent replay retrospective-24 --json)")
    r.add_argument("target", help="`retrospective-24` or a run directory")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    r.add_argument("--out", help="directory for report.md and the two figures")
    r.set_defaults(func=cmd_replay)


def _rows(path: str) -> list[dict]:
    from experience_bank.hashing import loads_strict
    if not Path(path).is_file():
        raise BadInput(f"no features file at {path}: give a JSONL file of feature rows")
    return [loads_strict(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def _features(args) -> list:
    from experience_bank.bank import Bank
    from experience_bank.records import CurrentContext, parse_model
    from policies import compile, features_from_row
    if args.features:
        if args.bank or args.context:
            raise BadInput("give either --features or --bank with --context, not both")
        return [features_from_row(row) for row in _rows(args.features)]
    if not (args.bank and args.context and Path(args.context).is_file()):
        raise BadInput("give --bank BANK and an existing --context CTX.json (or --features FILE)")
    ctx = parse_model(CurrentContext, Path(args.context).read_text(encoding="utf-8"), "context")
    bank = Bank.open(args.bank)
    try:
        return [compile(e.record, ctx, use_applicability=args.policy != "no_applicability", conflicted=e.conflicted)
                for e in bank.library_records()]
    finally:
        bank.close()


def cmd_authorize(args) -> int:
    from policies import EpisodeState, PolicyConfig, authorize, next_state
    config, state = PolicyConfig(), EpisodeState()
    for f in _features(args):  # one episode's worth: the quota is spent in input order
        d = authorize(f, args.policy, state, config)
        state = next_state(state, d)
        row = {"id": d.candidate_id, "S": f.S, "A": f.A, "Q": f.Q, "H": f.H, "action": d.action, "rule": d.rule,
               "decision_hash": d.decision_hash}
        print(json.dumps(row) if args.json else f"{d.candidate_id}\t{d.action}\t{d.rule}\tS={f.S} A={f.A} Q={f.Q}")
    return 0


def cmd_audit(args) -> int:
    from policies.audit import audit
    report = audit(args.path)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"{report['decisions']} decisions, head {report['frozen_decisions_head']}: {'OK' if report['ok'] else 'FAILED'}")
        for p in report["problems"]:
            print(f"  {p}")
        for name, m in report.get("policies", {}).items():
            print(f"  {name:20s} HER {m['her']}  BCov {m['bcov']}  harmful share {m['harmful_share']}")
    return 0 if report["ok"] else 1


def cmd_replay(args) -> int:
    from policies.replay import replay_retrospective, replay_run
    report = replay_retrospective() if args.target == "retrospective-24" else replay_run(args.target)
    if args.out:
        from policies.replay import write_report
        report["written"] = write_report(report, args.out)
    print(json.dumps(report, indent=1) if args.json else _summary(report))
    return 0 if report.get("audit", {}).get("ok", True) else 1


def _summary(report: dict) -> str:
    lines = [f"replay of {report['name']}"]
    if "note" in report:
        lines.append(report["note"])
    for key in ("retrospective", "shortfull"):
        if key in report:
            lines.append(f"{key}: {json.dumps({k: v for k, v in report[key].items() if not isinstance(v, dict)})}")
    lines += [f"missing: {m}" for m in report.get("missing", [])]
    return "\n".join(lines)

