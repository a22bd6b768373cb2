"""The decision ledger: a hash-chained, append-only record of every frozen decision with its
inputs, the outcome cells scored against it, where a run keeps both, and the verification that
recomputes every decision from its frozen inputs (the audit, policies/audit.py, reads it).

Ledger format (`runs/ID/decisions.jsonl`, one JSON object per line, written only through
`write_ledger_entry`):
    {"seq": 0, "episode_id": "E1",
     "inputs": {"record": <HistoricalRecord|Proposal JSON or null>, "context": <CurrentContext JSON or null>,
                "features": <Features JSON>, "config": <PolicyConfig JSON>, "state": <EpisodeState JSON>},
     "decision": <Decision JSON>,
     "prev_hash": <entry_hash of the previous line, or 64 zeros>,
     "entry_hash": chain_hash(prev_hash, content_hash({seq, episode_id, inputs, decision}))}
Outcome cells (`outcomes.jsonl`, written with `write_outcome`) are a separate file, one
`OutcomeCell` per line, linked to a ledger line by the recorded `decision_hash`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_serializer

from experience_bank.decisions import Decision, Features
from experience_bank.errors import BadInput
from experience_bank.files import jsonl_text
from experience_bank.frozen import Frozen, Ident, Sha256, omit_empty, parse_model
from experience_bank.hashing import chain_hash, content_hash, loads_strict
from experience_bank.records import CurrentContext, TrialCurve, parse_record
from policies.authorize import (
    NEEDS_GONOGO, WITHOUT_APPLICABILITY, EpisodeState, PolicyConfig, authorize, decision_hash, prior_input,
)
from policies.curves import card_facts
from policies.features import compile as compile_features
from policies.outcomes import IntervalClass

if TYPE_CHECKING:  # the run's frozen model is only passed through; sklearn loads with it, not with the ledger
    from policies.gonogo import GoNoGo

GENESIS = "0" * 64
DECISIONS_FILE = "decisions.jsonl"
"""The decision ledger's name inside a run or retrospective directory."""
OUTCOMES_FILE = "outcomes.jsonl"
"""The outcome cells' name beside it."""


class OutcomeCell(Frozen):
    """What happened to one frozen decision's candidate (read only after decisions are hashed).

    The one cell format: the loop (agent/loop/episode.py), the executed retrospective and the
    shipped Retrospective-24 replay all write and read it, so a user's own episodes feed the
    ShortFull and Retrospective diagnostics."""

    candidate_id: Ident
    """Card id."""
    decision_hash: Sha256
    """The recorded decision this cell scores."""
    outcome: IntervalClass | None
    """beneficial | harmful | neutral (policies.outcomes), None when no full run finished; "uncertain"
    where a seeded cell's intervals do not clear a class boundary (counted apart, in no class)."""
    family: Literal["finance", "sql", "function"] | None = None
    """Capability family of the card."""
    method: Literal["sft", "grpo"] | None = None
    """Training method of the card (per-method Spearman in ShortFull)."""
    trial_verdict: Literal["pass", "fail", "inconclusive"] | None = None
    """Verdict of the bounded trial, if one ran."""
    trial_delta: float | None = None
    """Delta_val of the trial in pp."""
    short: dict[Literal["0.05", "0.10", "0.20"], float] = {}
    """Short-run target effects by budget fraction, where run."""
    trial_curve: TrialCurve = {}
    """An episode's trial curve with its retention effects (Event.trial_curve), where recorded: what
    a learned trial rule reads (policies.trial_rules). Omitted where empty (cells from before keep their bytes)."""
    full: dict[Literal["target", "ifeval_p", "ifeval_i"], float] = {}
    """Full-run effects in pp (target, IFEval prompt / instruction strict), where run."""
    trial_device_hours: Annotated[float, Field(ge=0.0)] = 0.0
    """Device-hours of the trial (or what it would cost)."""
    full_device_hours: Annotated[float, Field(ge=0.0)] = 0.0
    """Device-hours of the full run (or what it would cost)."""
    seeds: Annotated[int, Field(ge=1)] = 1
    """Training seeds behind the effects (the seeded retrospective's K): above 1, `short`, `full` and
    `trial_delta` are seed means and `trial_verdict` is the verdict of those means."""
    full_ci: dict[Literal["target", "ifeval_p", "ifeval_i"], tuple[float, float]] = {}
    """95 % Student-t intervals of the full-run effects over the seeds (pp), where seeds >= 2: the ones
    the class was decided on (the retrospective pools the between-seed spread of a family and method)."""

    _omit_empty_curve = model_serializer(mode="wrap")(omit_empty("trial_curve"))


# --- writing -----------------------------------------------------------------------------


def read_lines(path: Path) -> list[dict]:
    """The ledger's lines as JSON objects (none where the file does not exist yet)."""
    if not path.is_file():
        return []
    return [loads_strict(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_ledger_entry(path: str | Path, *, episode_id: str, decision: Decision, config: PolicyConfig,
                       state: EpisodeState, record=None, context: CurrentContext | None = None) -> str:
    """Append one frozen decision with its inputs to the chain; returns the new entry hash."""
    path = Path(path)
    prev = read_lines(path)
    body = {"seq": len(prev), "episode_id": episode_id, "inputs": {
        "record": record.model_dump(mode="json") if record is not None else None,
        "context": context.model_dump(mode="json") if context is not None else None,
        "features": decision.features.model_dump(mode="json"),
        "config": config.model_dump(mode="json"), "state": state.model_dump(mode="json")},
        "decision": decision.model_dump(mode="json")}
    prev_hash = prev[-1]["entry_hash"] if prev else GENESIS
    entry_hash = chain_hash(prev_hash, content_hash(body))
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({**body, "prev_hash": prev_hash, "entry_hash": entry_hash}, sort_keys=True) + "\n")
    return entry_hash


def write_outcome(path: str | Path, cell: OutcomeCell) -> None:
    """Append one outcome cell to outcomes.jsonl."""
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(cell.model_dump_json() + "\n")


# --- verification -------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One verified ledger line, parsed."""

    episode_id: str
    features: Features
    config: PolicyConfig
    state: EpisodeState
    decision: Decision
    record: object | None
    context: CurrentContext | None


def _parse(line: dict) -> Entry:
    inp = line["inputs"]
    rec = parse_record(json.dumps(inp["record"])) if inp["record"] is not None else None
    ctx = parse_model(CurrentContext, json.dumps(inp["context"])) if inp["context"] is not None else None
    return Entry(line["episode_id"], parse_model(Features, json.dumps(inp["features"])),
                 parse_model(PolicyConfig, json.dumps(inp["config"])), parse_model(EpisodeState, json.dumps(inp["state"])),
                 parse_model(Decision, json.dumps(line["decision"])), rec, ctx)


def _problems(i: int, line: dict, prev_hash: str, gonogo: GoNoGo | None = None) -> tuple[list[str], Entry | None]:
    body = {k: line.get(k) for k in ("seq", "episode_id", "inputs", "decision")}
    out, at = [], f"line {i + 1}"  # the file's line; its seq is i
    if line.get("prev_hash") != prev_hash or line.get("seq") != i:
        out.append(f"{at}: broken chain (prev_hash or seq does not follow line {i})")
    if chain_hash(line.get("prev_hash", ""), content_hash(body)) != line.get("entry_hash"):
        out.append(f"{at}: entry_hash does not match its contents")
    e = _parse(line)
    if decision_hash(line["decision"]) != e.decision.decision_hash:
        out.append(f"{at}: decision_hash does not match the decision's fields")
    if e.decision.features != e.features:
        out.append(f"{at}: decision features differ from the frozen input features")
    if e.record is not None and e.context is not None:
        f2 = compile_features(e.record, e.context, use_applicability=e.decision.policy not in WITHOUT_APPLICABILITY,
                              conflicted=e.features.conflicted, discounts=e.config.discounts)
        if f2 != e.features:
            out.append(f"{at}: features do not recompile from the frozen record and context")
    card = card_facts(e.record.card) if e.record is not None else None
    again = authorize(e.features, e.decision.policy, e.state, e.config, prior_input(e.decision.policy, gonogo, card))
    if again.decision_hash != e.decision.decision_hash:
        hint = (": its routing reads the run's frozen go/no-go model, audit the run directory"
                if e.decision.policy in NEEDS_GONOGO and gonogo is None else "")
        out.append(f"{at}: recomputed decision {again.action}/{again.rule} ({again.decision_hash[:12]}) "
                   f"differs from recorded {e.decision.action}/{e.decision.rule} ({e.decision.decision_hash[:12]}){hint}")
    return out, e


def verify_ledger(lines: list[dict], gonogo: GoNoGo | None = None) -> tuple[list[str], list[Entry], str]:
    """(problems, parsed entries, head hash); any problem fails the audit. `gonogo`: the run's frozen
    go/no-go, which bcit_predictive's routing reads (policies.authorize.Prior)."""
    problems, entries, prev = [], [], GENESIS
    for i, line in enumerate(lines):
        try:
            found, entry = _problems(i, line, prev, gonogo)
        except (KeyError, TypeError, AttributeError, BadInput) as exc:  # a line that is not an entry at all
            found, entry = [f"line {i + 1}: not a decision-ledger entry ({type(exc).__name__}: {exc})"[:300]], None
        problems += found
        entries.append(entry)
        prev = line.get("entry_hash", "")
    return problems, entries, prev


# --- where a run keeps them --------------------------------------------------------------


def ledger_paths(path: str | Path) -> tuple[Path, Path | None]:
    """The ledger and its outcomes file (None: none yet) of an episode directory or a ledger file."""
    p = Path(path)
    if p.is_dir():
        ledger = p / DECISIONS_FILE
        if not ledger.is_file():
            raise BadInput(f"{p} has no decisions.jsonl: pass an episode directory or a ledger file")
        return ledger, outcomes_at(p / OUTCOMES_FILE)
    if not p.is_file():
        raise BadInput(f"no ledger at {p}: pass an episode directory or a decisions.jsonl file")
    sibling = p.with_name(OUTCOMES_FILE)
    return p, outcomes_at(sibling) if sibling != p else None


def outcomes_at(path: Path) -> Path | None:
    """The outcomes file beside a ledger (None: the run has none yet); a folder of its name is refused,
    not read as no outcomes."""
    if path.exists() and not path.is_file():
        raise BadInput(f"{path} is not a file: restore the run's {OUTCOMES_FILE} (or remove that folder)")
    return path if path.is_file() else None


def read_outcomes(path: Path | None) -> dict[str, OutcomeCell]:
    """Outcome cells keyed by the decision hash they score."""
    if path is None:
        return {}
    cells = {}
    for n, line in jsonl_text(path, "outcomes file"):  # names a non-UTF-8 line too
        try:
            cell = parse_model(OutcomeCell, line, "outcome cell")
        except BadInput as exc:
            raise BadInput(f"{path} line {n}: {exc}: restore the run's {OUTCOMES_FILE}") from None
        cells[cell.decision_hash] = cell
    return cells
