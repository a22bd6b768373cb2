"""The outcome-blind compiler: (record or proposal, current context) -> Features (docs/AUTHORIZER.md §3).

`compile` reads only three things: the record's card / source context / evidence summary /
applicability conditions B_i, and the structured metadata of the current context x_t. Neither
type has a field for a target outcome, so the compiler cannot read one; a test attaches
outcomes to a record and shows every feature and decision stays the same.

Field scores (0 mismatch, 0.5 unresolved, 1 match), from B_i against x_t:
1. family   B_i.family in x_t.families -> 1; in families but no target task registered -> 0.5.
2. data     per required dataset: id present with the same hash -> 1, present with another
            hash -> 0.5, missing -> 0; the field is the worst dataset.
3. runtime  B_i.runtime in x_t.runtimes -> 1, else 0.
4. parent   architecture differs (B_i's, or the source parent's) -> 0; else the source parent
            compared with the current one by identity and lineage (`relation`): the same weights
            -> 1, another stage of the same lineage (ancestor, descendant or sibling) or no
            lineage declared on either side -> 0.5, disjoint lineages -> 0; and at most 0.5
            when the chat template differs from B_i's (or the source parent's) or
            x_t.stage > B_i.max_stage. A proposal has no source parent: B_i's part alone.
5. protocol output protocol for the family differs -> 0, absent from x_t -> 0.5; evaluation
            protocol differs from the source's -> at most 0.5.
Hard conflicts: each named Conflict predicate of B_i is evaluated against x_t; any firing
sets H = 1. A predicate over a value x_t does not define (no output protocol for the
family) is unresolved and does not fire: only a contradiction fires.

`use_applicability=False` (the `no_applicability` ablation) ignores B_i entirely. What is
left is exactly: the five fields computed from the source context x_s against x_t with the
same rules (family = x_s.family, data = x_s.datasets, runtime = x_s.runtime, parent = x_s
parent's arch and chat template, protocol = x_s output and evaluation protocols), no stage
limit, and no hard conflicts (H = 0). A proposal has no x_s, so all five fields are 0.5.
S, chi and nu do not depend on B_i and are unchanged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash
from experience_bank.records import Applicability, Conflict, CurrentContext, HistoricalRecord, ModelRef, Proposal
from experience_bank.decisions import Features, FieldScores

DISCOUNTS: Mapping[str, float] = {"A": 1.0, "B": 0.75, "C": 0.5}
"""d(e): evidence-grade discounts of docs/AUTHORIZER.md §3 (a run may freeze others in PolicyConfig)."""

FIELD_NAMES = ("family", "data", "runtime", "parent", "protocol")


def _r(x: float) -> float:
    # Scores are products of short decimals; rounding removes float noise so that a Q that is
    # 0.30 on paper compares as 0.30 against tau_l (0.75 * 0.4 is 0.30000000000000004 otherwise).
    return round(x, 12)


def source_strength(grade: str, delta_src: float, kappa: float, discounts: Mapping[str, float] = DISCOUNTS) -> float:
    """S = d(e) * clip(delta_src / kappa, 0, 1); negative source effects clip to 0."""
    if kappa <= 0:
        raise BadInput(f"kappa must be positive, got {kappa}: use the pre-specified normalising scale in pp")
    return _r(discounts[grade] * min(max(delta_src / kappa, 0.0), 1.0))


# --- the five fields -------------------------------------------------------------------


def _family(family: str, ctx: CurrentContext) -> float:
    if family not in ctx.families:
        return 0.0
    return 1.0 if family in ctx.tasks else 0.5


def _data(required: Mapping[str, str], ctx: CurrentContext) -> float:
    def one(ds_id: str, sha: str) -> float:
        if ds_id not in ctx.datasets:
            return 0.0
        return 1.0 if ctx.datasets[ds_id] == sha else 0.5
    return min((one(i, h) for i, h in required.items()), default=1.0)


def relation(source: ModelRef, current: ModelRef) -> str:
    """How the evidence's parent stands to the current one: `same` weights, `related` (one is an
    ancestor of the other, or they share one: another stage of one lineage), `unrelated`
    (lineages known and disjoint), or `unknown` (neither declares a lineage)."""
    if source.sha256 == current.sha256:
        return "same"
    src, cur = {source.sha256, *source.lineage}, {current.sha256, *current.lineage}
    if src & cur:
        return "related"
    return "unrelated" if source.lineage or current.lineage else "unknown"


_RELATION_SCORE = {"same": 1.0, "related": 0.5, "unknown": 0.5, "unrelated": 0.0}


def _parent(arch: str, template: str | None, max_stage: int | None, ctx: CurrentContext,
            source: ModelRef | None = None) -> float:
    if arch != ctx.parent.arch:
        return 0.0
    template_differs = template is not None and template != ctx.parent.chat_template_sha256
    too_late = max_stage is not None and ctx.stage > max_stage
    score = 0.5 if template_differs or too_late else 1.0
    return score if source is None else min(score, _RELATION_SCORE[relation(source, ctx.parent)])


def _protocol(family: str, output_protocol: str, eval_protocol: str | None, ctx: CurrentContext) -> float:
    current = ctx.output_protocols.get(family)
    score = 0.5 if current is None else (1.0 if current == output_protocol else 0.0)
    if eval_protocol is not None and eval_protocol != ctx.eval_protocol:
        score = min(score, 0.5)
    return score


def _fields_from_applicability(rec: HistoricalRecord | Proposal, ctx: CurrentContext) -> FieldScores:
    b: Applicability = rec.applicability
    src = rec.source if isinstance(rec, HistoricalRecord) else None
    parent = _parent(b.parent_arch, b.chat_template_sha256, b.max_stage, ctx)
    if src is not None:  # the evidence's own parent must also fit the current one
        parent = min(parent, _parent(src.parent.arch, src.parent.chat_template_sha256, None, ctx, src.parent))
    return FieldScores(
        family=_family(b.family, ctx),
        data=_data({d.id: d.sha256 for d in b.datasets}, ctx),
        runtime=1.0 if b.runtime in ctx.runtimes else 0.0,
        parent=parent,
        protocol=_protocol(b.family, b.output_protocol, src.eval_protocol if src else None, ctx),
    )


def _fields_from_source(rec: HistoricalRecord | Proposal, ctx: CurrentContext) -> FieldScores:
    if isinstance(rec, Proposal):
        return FieldScores(family=0.5, data=0.5, runtime=0.5, parent=0.5, protocol=0.5)
    s = rec.source
    return FieldScores(
        family=_family(s.family, ctx),
        data=_data(s.datasets, ctx),
        runtime=1.0 if s.runtime in ctx.runtimes else 0.0,
        parent=_parent(s.parent.arch, s.parent.chat_template_sha256, None, ctx, s.parent),
        protocol=_protocol(s.family, s.output_protocol, s.eval_protocol, ctx),
    )


# --- hard conflicts --------------------------------------------------------------------


def _context_value(field: str, family: str, ctx: CurrentContext) -> Any:
    if field.startswith("parent."):
        return getattr(ctx.parent, field.split(".", 1)[1])
    if field == "output_protocol":
        return ctx.output_protocols.get(family)
    if field == "task":
        return ctx.tasks.get(family)
    if field == "datasets":
        return tuple(ctx.datasets)
    return getattr(ctx, field)  # stage, eval_protocol, runtimes


_ORDER = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def conflict_fires(c: Conflict, family: str, ctx: CurrentContext) -> bool:
    """True iff x_t contradicts the named condition; an undefined context value never fires."""
    left = _context_value(c.field, family, ctx)
    if left is None:
        return False
    collection = isinstance(left, tuple)
    if c.op in ("contains", "not_contains"):
        if not collection or not isinstance(c.value, str):
            raise BadInput(f"conflict {c.name!r}: {c.op} needs a collection field (runtimes, datasets) and a string value")
        return (c.value in left) == (c.op == "contains")
    if collection:
        raise BadInput(f"conflict {c.name!r}: field {c.field} is a collection, use contains / not_contains")
    if c.op in ("in", "not_in"):
        if not isinstance(c.value, tuple):
            raise BadInput(f"conflict {c.name!r}: {c.op} needs a list value")
        return (left in c.value) == (c.op == "in")
    if c.op in ("eq", "ne"):
        return (left == c.value) == (c.op == "eq")
    if not (isinstance(left, int) and isinstance(c.value, int)):  # order only on stage
        raise BadInput(f"conflict {c.name!r}: cannot compare {c.field}={left!r} with {c.value!r} by {c.op}")
    return _ORDER[c.op](left, c.value)


# --- compile ---------------------------------------------------------------------------


def compile(rec: HistoricalRecord | Proposal, ctx: CurrentContext, *, use_applicability: bool = True,  # noqa: A001 (the spec's name)
            conflicted: bool = False, discounts: Mapping[str, float] = DISCOUNTS) -> Features:
    """Outcome-blind features of one candidate in one context (see the module docstring)."""
    fields = (_fields_from_applicability if use_applicability else _fields_from_source)(rec, ctx)
    fired = tuple(c.name for c in rec.applicability.conflicts
                  if use_applicability and conflict_fires(c, rec.card.family, ctx))
    ev = rec.evidence if isinstance(rec, HistoricalRecord) else None
    return assemble(
        candidate_id=rec.card.id, record_hash=rec.content_hash(), context_hash=ctx.content_hash(),
        fields=fields, conflicts=fired, nu=rec.card.nu, conflicted=conflicted, discounts=discounts,
        grade=ev.grade if ev else None, delta_src=ev.delta_src if ev else None, kappa=ev.kappa if ev else None,
    )


def assemble(*, candidate_id: str, record_hash: str, context_hash: str, fields: FieldScores,
             conflicts: tuple[str, ...], nu: str, grade: str | None, delta_src: float | None,
             kappa: float | None, conflicted: bool = False, H: int | None = None,
             chi: int | None = None, discounts: Mapping[str, float] = DISCOUNTS) -> Features:
    """Features from their parts: S, A, Q are always computed here, never taken from input."""
    is_new = grade is None
    A = _r(sum(getattr(fields, n) for n in FIELD_NAMES) / len(FIELD_NAMES))
    S = None if is_new else source_strength(grade, delta_src, kappa, discounts)
    return Features(
        candidate_id=candidate_id, record_hash=record_hash, context_hash=context_hash, is_new=is_new,
        grade=grade, delta_src=delta_src, kappa=kappa, S=S, fields=fields, A=A,
        H=int(bool(conflicts)) if H is None else H, conflicts=conflicts,
        Q=None if is_new else _r(S * A), nu=nu,
        chi=(1 if grade == "A" else 0) if chi is None else chi, conflicted=conflicted,
    )


def compatibility_summary(features: list[Features]) -> dict[str, Any]:
    """How the candidates fit one context: counts of A, of each field's score and of H, and
    the hard conflicts that fired (by name). What the report and the retrospective print."""
    def counts(values) -> dict[str, int]:
        return {f"{v:g}": n for v, n in sorted(Counter(values).items(), reverse=True)}
    return {"n": len(features), "A": counts(f.A for f in features),
            "fields": {name: counts(getattr(f.fields, name) for f in features) for name in FIELD_NAMES},
            "H": sum(f.H for f in features), "conflicts": dict(Counter(n for f in features for n in f.conflicts))}


# --- the --features JSONL form -----------------------------------------------------------

ROW_KEYS = {"grade", "delta_src", "kappa", *FIELD_NAMES, "H", "nu", "chi", "is_new"}
OPTIONAL_ROW_KEYS = {"id", "conflicts", "conflicted"}


def features_from_row(row: Mapping[str, Any], discounts: Mapping[str, float] = DISCOUNTS) -> Features:
    """Features from one `--features` line (below the record level; hashes are of the row)."""
    missing, extra = ROW_KEYS - set(row), set(row) - ROW_KEYS - OPTIONAL_ROW_KEYS
    if missing or extra:
        raise BadInput(f"features row: missing keys {sorted(missing)}, unknown keys {sorted(extra)}; "
                       f"give exactly {sorted(ROW_KEYS)} (+ optional {sorted(OPTIONAL_ROW_KEYS)})")
    if row["is_new"] != (row["grade"] is None):
        raise BadInput("features row: is_new must be true exactly when grade is null (a proposal has no evidence)")
    if row["chi"] == 1 and row["grade"] != "A":
        raise BadInput(f"features row: chi=1 needs grade A (replicated matched control), got grade {row['grade']}")
    if row["H"] not in (0, 1):
        raise BadInput(f"features row: H must be 0 or 1, got {row['H']!r}")
    num = lambda k: None if row[k] is None else _number(k, row[k])  # noqa: E731 (JSON ints are fine here)
    scores = {n: num(n) for n in FIELD_NAMES}
    try:
        fields = FieldScores(**scores)
    except ValueError as exc:
        raise BadInput(f"features row: field scores must each be 0, 0.5 or 1 ({exc.errors()[0]['loc']})") from None
    names = tuple(row.get("conflicts", ())) or (("unnamed hard conflict",) if row["H"] else ())
    return assemble(
        candidate_id=str(row.get("id", "row")), record_hash=content_hash(dict(row)), context_hash=content_hash({}),
        fields=fields, conflicts=names, nu=row["nu"], grade=row["grade"], delta_src=num("delta_src"),
        kappa=num("kappa"), conflicted=bool(row.get("conflicted", False)), H=row["H"], chi=row["chi"],
        discounts=discounts,
    )


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"features row: {key} must be a number, got {value!r}")
    return float(value)
