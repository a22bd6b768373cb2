"""Paired runs: a short run's curve beside the full run of the same card, seed and world.

The one record the Validate predictors learn from and are scored on (issue 27): the forgetting
extrapolation (how a retention change grows with steps) and the learned go/no-go. A paired run
comes from one seed of one executed Retrospective cell (agent/experiments/retrospective.py,
`cells/<id>/s<seed>/cell.json`): its short runs at 5 %, 10 % and 20 % of the nominal steps and
its full run, every value an effect in pp against the matched control trained the same way.
The outcome class is policies.outcomes' rule on the full run, never a copy of it.

Two footings of the short runs. A loop's trial reads its target against the parent and IFEval
against the initial parent (TrialResult.curve_table), not against a matched control; a
retrospective's parent is the world's base, so a cell that keeps the parent's own scores beside
its control's (`parent`, `control`: agent/experiments/retro_run.py) gives each short reading on
the loop's footing too: effect + control[f] - parent["validation"], per metric (`parent_curve`).
A Validate model fits its inputs on one footing (`footing_of`: the parent footing where every run
has it, else the control footing for all, said in the fit's record, never mixed). The full run,
the label, stays against its matched control: that is the outcome definition.

Card fields (adapter, learning rate, steps, replay share) come from the card where it is given
(`card_facts`, the one reading of a CandidateCard's); a cell read without its card (an older
ledger) leaves them None. An episode's trial, which has no full run yet, is read with
`trial_curve` and `card_facts` (bcit_predictive's verdict, policies/predictive.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol

from experience_bank.errors import BadInput
from experience_bank.hashing import loads_strict
from experience_bank.cards import CandidateCard
from experience_bank.frozen import Frozen
from policies.outcomes import OutcomeClass, outcome_class

RETENTION = ("ifeval.prompt_strict", "ifeval.inst_strict")
"""The retention metrics a curve carries (IFEval strict, prompt and instruction level)."""

Footing = Literal["parent", "control"]
"""What a short run's readings are measured against: `parent`, as a loop's trial reads (the target
against the parent, IFEval against the initial parent), or the run's `control` (a matched control)."""
CONTROL_FOOTING_WARNING = "fitted on control footing; the loop reads parent footing"
"""What a run that applies a model fitted on the control footing says (manifest, report, reasons)."""


class CurvePoint(Frozen):
    fraction: float
    """Share of the card's nominal steps the run had taken (1.0: the full run)."""
    target_pp: float
    """Target effect (pp) against the matched control at the same share."""
    retention_pp: dict[str, float]
    """Retention effects (pp) by metric (RETENTION) against the matched control."""
    hard_failure: bool = False
    """A training sanity check failed on this run."""


class CardFacts(Protocol):
    """What a go/no-go reads of a card (a PairedRun has these; so has `card_facts` of a CandidateCard)."""

    @property
    def family(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def adapter(self) -> str | None: ...
    @property
    def learning_rate(self) -> float | None: ...
    @property
    def nominal_steps(self) -> int | None: ...
    @property
    def replay_share(self) -> float | None: ...


class CardFields(Frozen):
    """A card's CardFacts, where the card is at hand (an episode's candidate)."""

    family: str
    method: str
    adapter: str | None
    learning_rate: float | None
    nominal_steps: int | None
    replay_share: float | None


def card_facts(card: CandidateCard) -> CardFields:
    """The one reading of a CandidateCard's fields that a paired run and a go/no-go carry."""
    return CardFields(family=card.family, method=card.method, adapter=card.adapter.kind,
                learning_rate=card.hparams.learning_rate, nominal_steps=card.budget.steps,
                replay_share=card.data.replay_share)


def trial_curve(table: Mapping[str, Mapping[str, float]]) -> tuple[CurvePoint, ...]:
    """An episode's trial curve (experience_bank.records.TrialCurve: share -> {`target`, metric: pp})
    as curve points, ascending; its retention metrics are those of RETENTION it holds. No point is a
    hard failure: a trial with one is a Fail, which no trial rule overrides."""
    return tuple(sorted((CurvePoint(fraction=float(k), target_pp=float(p["target"]),
                                    retention_pp={m: float(p[m]) for m in RETENTION if m in p})
                         for k, p in table.items()), key=lambda p: p.fraction))


def curve_table(curve: Sequence[CurvePoint]) -> dict[str, dict[str, float]]:
    """Curve points as an episode's trial curve (experience_bank.records.TrialCurve, the layout of
    TrialResult.curve_table): the inverse of `trial_curve`, so a trial rule can read a paired run's
    short runs as it reads an episode's trial."""
    return {f"{p.fraction:.2f}": {"target": p.target_pp, **p.retention_pp} for p in curve}


class PairedRun(Frozen):
    card_id: str
    family: str
    method: str
    seed: int
    """The training seed."""
    world_seed: int
    curve: tuple[CurvePoint, ...]
    """The short runs, ascending in fraction (each at most 0.2)."""
    full: CurvePoint
    """The full run (fraction 1.0)."""
    adapter: str | None = None
    """`full` or `lora`; None where the card was not at hand."""
    learning_rate: float | None = None
    nominal_steps: int | None = None
    replay_share: float | None = None
    parent_curve: tuple[CurvePoint, ...] | None = None
    """The short runs on the loop's footing (the target and IFEval against the parent, which in a
    retrospective is the initial parent), ascending; None where the cell has no parent scores."""

    def outcome(self, *, band: float, ifeval_drop_pp: float) -> OutcomeClass:
        """The full run's class (policies.outcomes.outcome_class, the one rule)."""
        r = self.full.retention_pp
        return outcome_class(self.full.target_pp, r["ifeval.prompt_strict"], r["ifeval.inst_strict"], band=band,
                             ifeval_drop_pp=ifeval_drop_pp, hard_failure=self.full.hard_failure)


def _point(fraction: float, effect: Mapping) -> CurvePoint:
    return CurvePoint(fraction=float(fraction), target_pp=float(effect["target"]),
                      retention_pp={f"ifeval.{m}": float(v) for m, v in sorted(effect["ifeval"].items())},
                      hard_failure=bool(effect.get("sanity_failures")))


def _on_parent(effect: Mapping, control: Mapping, parent: Mapping) -> dict:
    """A short reading moved from its matched control to the parent: effect + control - parent, per
    metric (the child's score less the parent's, as a loop's trial reads it)."""
    ifeval = {m: round(float(v) + float(control[m]) - float(parent[m]), 6) for m, v in effect["ifeval"].items()}
    return dict(effect) | {"target": round(float(effect["target"]) + float(control["target"])
                                           - float(parent["target"]), 6), "ifeval": ifeval}


def _ascending(points: Iterable[CurvePoint]) -> tuple[CurvePoint, ...]:
    return tuple(sorted(points, key=lambda p: p.fraction))


def _parent_curve(cell: Mapping) -> tuple[CurvePoint, ...] | None:
    """The short runs on the parent footing, where the cell keeps the parent's and controls' scores."""
    if "parent" not in cell:
        return None
    parent = cell["parent"]["validation"]
    return _ascending(_point(float(f), _on_parent(e, cell["control"][f], parent)) for f, e in cell["short"].items())


def paired_run(cell: Mapping, *, world_seed: int, card: CandidateCard | None = None) -> PairedRun:
    """One seed of one executed cell (its cell.json dict) as a paired run."""
    try:
        curve = _ascending(_point(float(f), e) for f, e in cell["short"].items())
        full = _point(1.0, cell["full"])
        fields = dict(card_id=cell["id"], family=cell["family"], method=cell["method"], seed=int(cell.get("seed", 0)),
                      world_seed=world_seed, curve=curve, full=full, parent_curve=_parent_curve(cell))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        name = cell.get("id", "?") if isinstance(cell, Mapping) else "?"
        raise BadInput(f"cell {name!r} is not an executed retrospective cell ({exc!r}): "
                       "pass the cell.json files of `agent retrospective --execute`") from exc
    if card is not None:
        fields |= card_facts(card).model_dump(include={"adapter", "learning_rate", "nominal_steps", "replay_share"})
    return PairedRun(**fields)


def footing_of(runs: Sequence[PairedRun], wanted: Footing | None = None) -> tuple[Footing, str | None]:
    """The footing one fit reads every run's short curve on, and a note where it is not the loop's:
    `parent` where every run has its parent curve, else `control` for all (never mixed). `wanted`
    forces one (a held-out fold takes its whole evaluation's); `parent` on a run without it is BadInput."""
    lacking = sum(r.parent_curve is None for r in runs)
    if wanted == "parent" and lacking:
        raise BadInput(f"{lacking} of {len(runs)} paired runs have no parent scores for the parent footing: "
                       "pass cells of `agent retrospective --execute` that keep `parent`, or fit on the control footing")
    chosen: Footing = wanted or ("parent" if runs and not lacking else "control")
    if chosen == "parent":
        return chosen, None
    why = (f"{lacking} of {len(runs)} paired runs lack the parent's scores (cells from before they were kept, "
           "e.g. world v3's published JSON), so every run is read against its matched control"
           if lacking else "the control footing was asked for")
    return chosen, f"{CONTROL_FOOTING_WARNING}: {why}"


def curve_on(run: PairedRun, footing: Footing) -> tuple[CurvePoint, ...]:
    """A run's short curve on `footing` (footing_of chose it; a parent curve it lacks is BadInput)."""
    if footing == "control":
        return run.curve
    if run.parent_curve is None:
        raise BadInput(f"paired run {run.card_id} (seed {run.seed}) has no parent scores: "
                       "fit on cells that keep `parent`, or on the control footing")
    return run.parent_curve


def seed_cells(out: str | Path) -> Iterable[tuple[Path, dict]]:
    """Every finished per-seed cell of an executed retrospective directory (cells/<id>/s<seed>/cell.json),
    with its path; BadInput naming a file that is not a JSON object."""
    root = Path(out) / "cells"
    if not root.is_dir():
        raise BadInput(f"{out} has no cells/ folder: pass the --out directory of `agent retrospective --execute`")
    for path in sorted(root.glob("*/s*/cell.json")):
        yield path, _json_object(path, "an executed retrospective cell")


def _json_object(path: Path, what: str) -> dict:
    """A JSON object file, or BadInput naming the file (a hand-edited or truncated results file must
    not end a fit in a traceback)."""
    try:
        doc = loads_strict(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, BadInput) as exc:
        raise BadInput(f"{path} is not {what} ({exc}): restore it from git or run the measurement again") from None
    if not isinstance(doc, dict):
        raise BadInput(f"{path} is not {what} (a JSON {type(doc).__name__}, not an object): restore it from git "
                       "or run the measurement again")
    return doc


def ledger(out: str | Path) -> dict:
    """An executed retrospective directory's ledger.json ({} where it has none)."""
    path = Path(out) / "ledger.json"
    return _json_object(path, "a retrospective ledger") if path.exists() else {}  # a folder there is refused


def world_seed_of(out: str | Path) -> int:
    """The world seed an executed retrospective directory's ledger names (0 where it names none)."""
    value = ledger(out).get("world_seed", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{Path(out) / 'ledger.json'} names world seed {value!r}, not an integer: restore it from git "
                       "or run the measurement again")
    return value


def paired_runs(out: str | Path, *, cards: Mapping[str, CandidateCard] | None = None) -> list[PairedRun]:
    """The paired runs of one executed retrospective directory; its world seed from its ledger.json."""
    world_seed = world_seed_of(out)
    cards = cards or {}
    runs = []
    for path, cell in seed_cells(out):
        try:
            runs.append(paired_run(cell, world_seed=world_seed, card=cards.get(cell.get("id"))))
        except BadInput as exc:
            raise BadInput(f"{path}: {exc}") from None
    return runs


def paired_runs_json(path: str | Path) -> list[PairedRun]:
    """The paired runs of a retrospective's published JSON (docs/results/retrospective-default.json:
    its `cells` and `ledger`); the world seed from the ledger, 0 where it names none (world v3)."""
    try:
        doc = loads_strict(Path(path).read_text(encoding="utf-8"))
        cells, facts = doc["cells"], doc.get("ledger", {})
        if not isinstance(cells, list):
            raise TypeError("`cells` is not a list")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else repr(exc)  # not the bytes it read
        raise BadInput(f"{path} is not a retrospective JSON: it has no `cells` list ({why}); "
                       "pass docs/results/retrospective-*.json or an executed retrospective directory") from None
    return [paired_run(c, world_seed=int(facts.get("world_seed", 0))) for c in cells]
