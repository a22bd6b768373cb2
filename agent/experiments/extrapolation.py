"""`agent extrapolate`: the forgetting extrapolation (policies/extrapolate.py) measured on executed retrospectives.

Reads paired runs from executed retrospective directories (cells/<id>/s<seed>/cell.json) or
published retrospective JSON files, holds out each cell (and, with several world seeds, each
world), and writes a Markdown report and its JSON: |predicted - full| raw against extrapolated,
and the guard decision's accuracy either way. The guard is the run config's
`gate_ifeval_drop_pp`, read through retro_cells (its one owner), never a copy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from experience_bank.errors import BadInput
from agent.experiments.retro_cells import IFEVAL_DROP_PP
from agent.world.catalogue import adapter_kinds, catalogue_sha256
from policies.curves import PairedRun, ledger, paired_runs, paired_runs_json
from policies.extrapolate import MIN_RUNS, Choice, Fit, fit
from policies.extrapolate_heldout import ErrorReport, extrapolation_error

SHORT = {"ifeval.prompt_strict": "prompt", "ifeval.inst_strict": "inst"}


def load_runs(sources: Sequence[str | Path]) -> list[PairedRun]:
    """Every paired run of the sources (directories or JSON files); BadInput on a missing source or a
    run given twice (the same world seed, card and seed)."""
    runs: list[PairedRun] = []
    for src in map(Path, sources):
        if src.is_dir():
            runs += _with_adapters(src, paired_runs(src))
        elif src.is_file():
            runs += paired_runs_json(src)
        else:
            raise BadInput(f"--retrospective {src}: no such directory or file; pass an executed retrospective "
                           "directory or a retrospective JSON")
    keys = [(r.world_seed, r.card_id, r.seed) for r in runs]
    if len(set(keys)) != len(keys):
        raise BadInput("the same (world seed, card, seed) came twice: pass each retrospective once")
    return runs


def _with_adapters(out: Path, runs: list[PairedRun]) -> list[PairedRun]:
    """The runs with their cards' adapter kinds where the directory ran this catalogue (its ledger's
    catalogue_sha256); otherwise as read, adapter None (the fit then groups them by method only)."""
    if ledger(out).get("catalogue_sha256") != catalogue_sha256():
        return runs
    kinds = adapter_kinds()
    return [r.model_copy(update={"adapter": kinds.get(r.card_id)}) for r in runs]


def measure(sources: Sequence[str | Path], *, min_runs: int = MIN_RUNS,
            choice: Choice = "auto") -> tuple[Fit, list[ErrorReport]]:
    """The fit on every run, and the held-out errors: by cell, and by world when there are several."""
    runs = load_runs(sources)
    reports = [extrapolation_error(runs, drop_pp=IFEVAL_DROP_PP, holdout="cell", min_runs=min_runs, choice=choice)]
    if len({r.world_seed for r in runs}) > 1:
        reports.append(extrapolation_error(runs, drop_pp=IFEVAL_DROP_PP, holdout="world", min_runs=min_runs,
                                           choice=choice))
    return fit(runs, min_runs=min_runs, choice=choice), reports


def write(out: Path, sources: Sequence[str | Path], fitted: Fit, reports: list[ErrorReport], command: str) -> Path:
    """out (Markdown) and out with .json beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown(sources, fitted, reports, command), encoding="utf-8")
    doc = {"sources": _sources(sources), "fit": fitted.model_dump(mode="json"),
           "reports": [r.model_dump(mode="json") for r in reports]}
    path = out.with_suffix(".json")
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _sources(sources: Sequence[str | Path]) -> list[dict[str, str]]:
    def sha(p: Path) -> str:
        files = [p] if p.is_file() else sorted(p.glob("cells/*/s*/cell.json"))
        return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
    return [{"path": str(p), "sha256": sha(Path(p))} for p in sources]


def _pp(x: float) -> str:
    return f"{x:+.1f}"


def _ci(ci: tuple[float, float] | None) -> str:
    return "" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]"


def markdown(sources: Sequence[str | Path], fitted: Fit, reports: list[ErrorReport], command: str) -> str:
    lines = ["# Forgetting extrapolated to full length (issue 27, item 2)", "",
             f"Command: `{command}`", "", "Sources:", ""]
    lines += [f"- `{s['path']}` (sha256 {s['sha256'][:16]})" for s in _sources(sources)]
    lines += ["", f"Guard: an IFEval strict change below -{IFEVAL_DROP_PP:g} pp (RunConfig.gate_ifeval_drop_pp).", ""]
    lines += ["Footing: the trial readings against the parent, as a loop's trial reads them; the full runs against "
              "their matched controls." if fitted.footing == "parent"
              else f"Footing: every reading against its matched control ({fitted.footing_note}).", ""]
    lines += _fit_table(fitted)
    for rep in reports:
        lines += _error_tables(rep)
    lines += _run_table(reports[0])
    return "\n".join(lines) + "\n"


def _fit_table(fitted: Fit) -> list[str]:
    lines = ["## The fit on every run", "",
             "Prediction: full = trial reading + growth; growth by "
             + ("the model with the smallest held-out mean absolute error on the group's runs (a world held out at "
                "a time where they span several, else a run)" if fitted.choice == "auto"
                else f"the {fitted.choice} model throughout")
             + " (none: 0, the raw reading; offset: mean of full - reading; power: c (1 - f_t^b) of Delta(f) = c f^b).",
             "", "| group | n | metric | model | growth pp | offset growth | power c | power b (se) | held out by | "
             "MAE none | MAE offset | MAE power |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in fitted.groups:
        for m, mf in g.metrics.items():
            se = "undefined" if mf.power_b_se is None else f"{mf.power_b_se:.2g}"
            mae = mf.heldout_mae_pp or {}
            lines.append(f"| {g.method}/{g.adapter} | {g.n_runs} | {SHORT[m]} | {mf.model} | {_pp(mf.growth_pp)} | "
                         f"{_pp(mf.growth_offset_pp)} | {_pp(mf.power_c_pp)} | {mf.power_b:.2f} ({se}) | "
                         f"{mf.heldout or 'n/a'} | "
                         + " | ".join(f"{mae[k]:.2f}" if k in mae else "n/a" for k in ("none", "offset", "power")) + " |")
    skipped = ", ".join(fitted.skipped) or "none"
    return lines + ["", f"Groups with fewer than {fitted.min_runs} runs (their runs use a wider group): {skipped}.", ""]


def _error_tables(rep: ErrorReport) -> list[str]:
    lines = [f"## Held out by {rep.holdout}", "",
             "|predicted - full| in pp: mean [95 % t interval], median [95 % order-statistic interval]; "
             "covered: full values inside their 95 % prediction interval.", ""]
    lines += _errors_table(rep.errors)
    if rep.open_errors:
        lines += ["", "The same on the runs whose 20 % reading keeps within the guard on both metrics, where a "
                  "full-length prediction decides the trial's retention check (a reading already past the guard "
                  "fails the check as it is):", ""]
        lines += _errors_table(rep.open_errors)
    lines += ["", "Guard decision (full-length change below the guard), right / n [Clopper-Pearson 95 %]:", "",
              "| method | n | full runs breaking the guard | raw 20 % right | extrapolated right |", "|---|---|---|---|---|"]
    for k, g in rep.guard.items():
        lines.append(f"| {k} | {g.n} | {g.breaches} | {g.raw_right}/{g.n}{_ci(g.raw_right_ci)} | "
                     f"{g.extrapolated_right}/{g.n}{_ci(g.extrapolated_right_ci)} |")
    return lines + [""]


def _errors_table(errors: dict) -> list[str]:
    lines = ["| metric | method | n | raw 20 % mean | raw median | extrapolated mean | extrapolated median | covered |",
             "|---|---|---|---|---|---|---|---|"]
    for m, by in errors.items():
        for k, s in by.items():
            lines.append(f"| {SHORT[m]} | {k} | {s.n} | {s.raw_mean_pp:.2f}{_ci(s.raw_mean_ci)} | "
                         f"{s.raw_median_pp:.2f}{_ci(s.raw_median_ci)} | "
                         f"{s.extrapolated_mean_pp:.2f}{_ci(s.extrapolated_mean_ci)} | "
                         f"{s.extrapolated_median_pp:.2f}{_ci(s.extrapolated_median_ci)} | {s.covered}/{s.n} |")
    return lines


def _run_table(rep: ErrorReport) -> list[str]:
    lines = [f"## Every held-out run (by {rep.holdout})", "",
             "| card | world | seed | group | reading p / i | extrapolated p [95 %] | extrapolated i [95 %] | "
             "full p / i | breaks guard: full / raw / extrapolated |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rep.runs:
        p, i = r.metrics["ifeval.prompt_strict"], r.metrics["ifeval.inst_strict"]
        group = r.group + (" (fallback)" if r.fallback else "")
        yn = ["yes" if b else "no" for b in (r.breach, r.raw_breach, r.extrapolated_breach)]
        lines.append(f"| {r.card_id} | {r.world_seed} | {r.seed} | {group} | {_pp(p.reading_pp)} / {_pp(i.reading_pp)} | "
                     f"{_pp(p.predicted_pp)} [{_pp(p.interval_pp[0])}, {_pp(p.interval_pp[1])}] | "
                     f"{_pp(i.predicted_pp)} [{_pp(i.interval_pp[0])}, {_pp(i.interval_pp[1])}] | "
                     f"{_pp(r.full_pp['ifeval.prompt_strict'])} / {_pp(r.full_pp['ifeval.inst_strict'])} | "
                     f"{' / '.join(yn)} |")
    return lines
