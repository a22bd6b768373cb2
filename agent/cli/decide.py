"""`agent authorize`, `agent audit`, `agent replay`: thin commands over policies/.

Examples:
    agent authorize --bank bank.db --context ctx.json --policy bcit --json
    agent authorize --features features.jsonl --policy flat_additive --json
    agent audit runs/E1 --json
    agent replay retrospective-24 --json --out replay/
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from agent.inputs import check_bank_file, jsonl_lines, read_text
from experience_bank.errors import BadInput
from experience_bank.hashing import loads_strict
from experience_bank.frozen import Grade, Ident, Nu, parse_model
from experience_bank.records import CurrentContext
from experience_bank.decisions import Decision
from policies import EpisodeState, PolicyConfig, authorize, decide, features_from_row, next_state
from policies.authorize import check_reads_gonogo, prior_input
from policies.curves import card_facts
from policies.decision_ledger import DECISIONS_FILE, ledger_paths  # the one owner of where an episode keeps them



def _on_grid(value: float) -> float:
    if value not in (0.0, 0.5, 1.0):
        raise ValueError(f"a field score is 0, 0.5 or 1, got {value}")
    return value


Score = Annotated[float, AfterValidator(_on_grid)]
"""A compatibility field score."""


def register(sub) -> None:
    """Add authorize, audit and replay to the `agent` parser."""
    p = sub.add_parser("authorize", help="authorize candidates (e.g. agent authorize --features f.jsonl --policy bcit --json)")
    p.add_argument("--bank", help="bank whose current library is authorized")
    p.add_argument("--context", help="current context JSON (with --bank)")
    p.add_argument("--features", help="JSONL of feature rows (instead of --bank/--context)")
    p.add_argument("--policy", default="bcit", help="policy name (default bcit)")
    p.add_argument("--gonogo-model", dest="gonogo_model", metavar="JSON",
                   help="with --policy bcit_predictive and --bank: the fitted go/no-go whose prior-only head may "
                        "skip a trial (as `agent run --gonogo-model`); without it the policy routes as BCIT")
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


class FeatureRow(BaseModel):
    """One `--features` line, validated strictly before policies.features_from_row computes S, A, Q."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    id: Ident = "row"
    """Candidate id (default `row`)."""
    is_new: bool
    """True for a proposal (no evidence: grade, delta_src and kappa null)."""
    grade: Grade | None
    """Evidence grade A/B/C, null for a proposal."""
    delta_src: Annotated[float, Field(ge=-100.0, le=100.0)] | None
    """Source effect in pp (a share of 100 pp at most either way)."""
    kappa: Annotated[float, Field(gt=0.0, le=100.0)] | None
    """Normalising scale in pp."""
    family: Score
    """1. capability-family match."""
    data: Score
    """2. training-data availability and identity."""
    runtime: Score
    """3. runtime availability."""
    parent: Score
    """4. current-parent compatibility."""
    protocol: Score
    """5. evaluation / output-protocol compatibility."""
    H: Annotated[int, Field(ge=0, le=1)]
    """1 iff a named hard conflict fired."""
    nu: Nu
    """Validation feasibility."""
    chi: Annotated[int, Field(ge=0, le=1)]
    """1 iff the evidence is a replicated matched control (grade A)."""
    conflicts: tuple[Annotated[str, Field(min_length=1, max_length=120)], ...] = ()
    """Names of the conflicts that fired."""
    conflicted: bool = False
    """Consolidation found contradicting evidence."""

    @model_validator(mode="after")
    def _consistent(self) -> "FeatureRow":
        evidence = (self.grade, self.delta_src, self.kappa)
        if self.is_new and evidence != (None, None, None):
            raise ValueError("a proposal (is_new true) has no evidence: grade, delta_src and kappa must be null")
        if not self.is_new and None in evidence:
            raise ValueError("a historical row (is_new false) needs grade, delta_src and kappa")
        if (self.chi == 1) != (self.grade == "A"):
            raise ValueError("chi must be 1 exactly when grade is A")
        if self.conflicts and self.H == 0:
            raise ValueError("named conflicts need H = 1")
        return self


def _rows(path: str) -> list[dict]:
    """Feature rows, each one strictly validated; BadInput names the file and the line."""
    rows = []
    for n, line in jsonl_lines(path, "features file"):
        try:
            parse_model(FeatureRow, line, "features row")
        except BadInput as exc:
            raise BadInput(f"features file {path} line {n}: {exc}") from None
        rows.append(loads_strict(line))
    return rows


def _deciders(args) -> list[Callable[[EpisodeState, PolicyConfig], Decision]]:
    """One decision function per candidate, in input order: a features row is authorized as
    given; a library record goes through policies.decide, which compiles it the way the policy
    needs (applicability or not, the config's discounts) and authorizes it."""
    from experience_bank.bank import Bank  # noqa: PLC0415 (sqlite_utils)
    model = _gonogo_model(args)
    if args.features:
        if args.bank or args.context:
            raise BadInput("give either --features or --bank with --context, not both")
        if model is not None:
            raise BadInput("--gonogo-model reads each candidate's card, which a features row does not carry: "
                           "use it with --bank and --context")
        return [partial(authorize, features_from_row(row), args.policy) for row in _rows(args.features)]
    if not (args.bank and args.context):
        raise BadInput("give --bank BANK and an existing --context CTX.json (or --features FILE)")
    text = read_text(args.context, "context file")
    try:
        ctx = parse_model(CurrentContext, text, "context")
    except BadInput as exc:
        raise BadInput(f"context file {args.context}: {exc}") from None
    check_bank_file(args.bank)
    bank = Bank.open(args.bank)
    try:
        return [partial(decide, e.record, ctx, args.policy, conflicted=e.conflicted,
                        prior=prior_input(args.policy, model, card_facts(e.record.card)))
                for e in bank.library_records()]
    finally:
        bank.close()


def _gonogo_model(args):
    """The --gonogo-model's go/no-go (None: not given); BadInput where it is unreadable, not a model, or
    given with a policy that reads none."""
    if not args.gonogo_model:
        return None
    from policies import gonogo  # noqa: PLC0415 (scikit-learn)

    check_reads_gonogo(args.policy)
    return gonogo.loads(read_text(args.gonogo_model, "go/no-go model"))


def cmd_authorize(args) -> int:
    config, state = PolicyConfig(), EpisodeState()
    for decision_of in _deciders(args):  # one episode's worth: the quota is spent in input order
        d = decision_of(state, config)
        f = d.features
        state = next_state(state, d)
        row = {"id": d.candidate_id, "S": f.S, "A": f.A, "Q": f.Q, "H": f.H, "action": d.action, "rule": d.rule,
               "decision_hash": d.decision_hash}
        print(json.dumps(row) if args.json else f"{d.candidate_id}\t{d.action}\t{d.rule}\tS={f.S} A={f.A} Q={f.Q}")
    return 0


def _check_ledger_files(path: str) -> None:
    """Every file `audit` reads is UTF-8 JSONL of objects (the ledger at least one line)."""
    ledger, outcomes = ledger_paths(path)
    jsonl_lines(ledger, "decision ledger")
    if outcomes is not None:
        jsonl_lines(outcomes, "outcomes file", allow_empty=True)


def _adoption_thresholds(path: str) -> dict[str, float] | None:
    """The gate's adoption thresholds frozen in an episode directory's manifest (None for a bare ledger)."""
    from agent.run.rundir import RunDir  # noqa: PLC0415 (pydantic records)

    if not Path(path).is_dir():
        return None
    rd = RunDir(Path(path))
    return dict(rd.manifest().gate.min_gain_pp) if rd.started() else None


def _frozen_gonogo(path: str):
    """The go/no-go model an episode directory froze (bcit_predictive's), else None: the audit
    recomputes that policy's trial verdicts from this copy, never from the user's file."""
    from agent.run.gonogo_model import frozen_model  # noqa: PLC0415 (scikit-learn)
    from agent.run.rundir import RunDir  # noqa: PLC0415 (pydantic records)

    rd = RunDir(Path(path))
    return frozen_model(rd, rd.manifest()) if Path(path).is_dir() and rd.started() else None


def _frozen_retention(path: str):
    """The extrapolation model an episode directory froze, with its frozen IFEval guard, else None:
    the audit applies the trial's retention check at full length from this copy, as the loop did."""
    from agent.run.extrapolation_model import frozen_guard  # noqa: PLC0415 (scipy)
    from agent.run.rundir import RunDir  # noqa: PLC0415 (pydantic records)

    rd = RunDir(Path(path))
    return frozen_guard(rd, rd.manifest()) if Path(path).is_dir() and rd.started() else None


def cmd_audit(args) -> int:
    from policies.audit import audit  # noqa: PLC0415 (numpy)
    _check_ledger_files(args.path)
    report = audit(args.path, _adoption_thresholds(args.path), _frozen_gonogo(args.path), _frozen_retention(args.path))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"{report['decisions']} decisions, head {report['frozen_decisions_head']}: {'OK' if report['ok'] else 'FAILED'}")
        for p in report["problems"]:
            print(f"  {p}")
        own = report.get("own_policy")
        if own:
            print(f"  {own['policy']} (the policy that ran): its counterfactual walk equals the recorded decision on "
                  f"{own['agree']} of {own['of']}")
        for name, m in report.get("policies", {}).items():
            print(f"  {name:20s} HER {_pct(m['her'])}  BCov {_pct(m['bcov'])}  harmful share {_pct(m['harmful_share'])}")
        for note in report.get("coverage", {}).get("notes", []):
            print(f"  note: {note}")
    return 0 if report["ok"] else 1


def _pct(x: float | None) -> str:
    return "undefined" if x is None else f"{100 * x:.1f}%"


def cmd_replay(args) -> int:
    from policies.replay import replay_retrospective, replay_run  # noqa: PLC0415 (numpy)

    if args.target != "retrospective-24" and Path(args.target, DECISIONS_FILE).is_file():
        _check_ledger_files(args.target)
    report = replay_retrospective() if args.target == "retrospective-24" else replay_run(args.target)
    if args.out:
        from policies.replay import write_report  # noqa: PLC0415 (numpy)
        report["written"] = write_report(report, args.out)
    print(json.dumps(report, indent=1) if args.json else _summary(report))
    return 0 if report.get("audit", {}).get("ok", True) else 1


def _summary(report: dict) -> str:
    from policies.replay import audit_table  # noqa: PLC0415 (numpy)
    lines = [f"replay of {report['name']}"]
    if "note" in report:
        lines.append(report["note"])
    if report.get("audit", {}).get("policies"):
        lines += ["audit:", *audit_table(report["audit"])]
    for key in ("retrospective", "shortfull"):
        if key in report:
            lines.append(f"{key}: {json.dumps({k: v for k, v in report[key].items() if not isinstance(v, dict)})}")
    lines += [f"missing: {m}" for m in report.get("missing", [])]
    return "\n".join(lines)

