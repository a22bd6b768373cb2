"""Replay of the published diagnostics (docs/AUTHORIZER.md §9) from cell-level data, never by re-running a model.

`replay_retrospective()` reads the shipped ledger policies/data/retrospective24.json — a
RECONSTRUCTION whose per-cell values agree with the published aggregates, not the paper's
data — and recomputes every number with the real policy code and scipy.stats:
Retrospective-24 (matched-control effects), Audit-24 (every policy walked over the frozen
features; outcomes classified from the full-run effects) and ShortFull-24 (short vs full).
`replay_run(run_dir)` computes the same diagnostics from a run's decisions.jsonl and
outcomes.jsonl and lists the diagnostics its records cannot support.

Definitions (frozen in the data file where they are numbers):
- direction, retention-safe and the outcome class of a full run: policies/outcomes.py (the
  one definition, shared with the run audit and the executed retrospective), with the
  shipped file's neutral band (0.5 pp) and retention floor (-2 pp);
- Pass detector: trial verdict `pass` against outcome class `beneficial`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.families import FAMILIES
from experience_bank.hashing import content_hash
from policies import stats
from policies.audit import Cell, audit, score_policies
from policies.decision_ledger import DECISIONS_FILE, OUTCOMES_FILE, OutcomeCell, outcomes_at, read_outcomes
from policies.authorize import PolicyConfig
from policies.outcomes import UNCERTAIN, direction, outcome_class, retention_safe
from policies.features import features_from_row

DATA = Path(__file__).parent / "data" / "retrospective24.json"
BUDGETS = ("0.05", "0.10", "0.20")
AUDIT_POLICIES = ("bcit", "flat_additive", "additive_veto", "no_applicability", "no_hard_veto", "applicability_only")
LEASES = ("0", "1", "unlimited")
"""Fallback leases the Audit-24 aggregates are also shown under (the lease is an interpretation)."""


def classify(full: dict, band: float, floor: float) -> str:
    """Outcome class of a full run (policies.outcomes), the floor given as the data file's -2 pp."""
    return outcome_class(full["target"], full["ifeval_p"], full["ifeval_i"], band=band, ifeval_drop_pp=-floor)


# --- the shipped ledger -> cells ----------------------------------------------------------


def load(path: Path = DATA) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _cell(c: dict, band: float, floor: float) -> Cell:
    row = {"id": c["id"], **c["features"]}
    noapp = {**row, **c["fields_without_applicability"], "H": 0, "conflicts": []}
    f = features_from_row(row)
    outcome = OutcomeCell(
        candidate_id=c["id"], decision_hash=content_hash(row), outcome=classify(c["full"], band, floor),
        trial_verdict=c["trial"]["verdict"], trial_delta=c["short"]["0.20"], short=c["short"],
        full={k: c["full"][k] for k in ("target", "ifeval_p", "ifeval_i")},
        trial_device_hours=round(c["trial"]["cost_ratio"] * c["full"]["device_hours"], 6),
        full_device_hours=c["full"]["device_hours"])
    return Cell(c["id"], "retrospective-24", f, features_from_row(noapp), f.nu, outcome)


# --- the three studies --------------------------------------------------------------------


def retrospective(cells: list[dict], band: float, floor: float) -> dict:
    """Retrospective-24: directions of the matched-control target effects, and retention."""
    dirs = {c["id"]: direction(c["matched"]["target"], band) for c in cells}
    by_family = {fam: {"up": 0, "flat": 0, "down": 0} for fam in FAMILIES}
    for c in cells:
        by_family[c["family"]][{1: "up", 0: "flat", -1: "down"}[dirs[c["id"]]]] += 1
    improving = [c for c in cells if dirs[c["id"]] > 0]
    return {"direction_counts": {"positive": sum(d > 0 for d in dirs.values()), "neutral": sum(d == 0 for d in dirs.values()),
                                 "negative": sum(d < 0 for d in dirs.values())},
            "by_family": by_family, "improving": len(improving),
            "retention_safe_among_improving": sum(retention_safe(c["matched"]["ifeval_p"], c["matched"]["ifeval_i"], -floor)
                                                  for c in improving)}


def audit_study(cells: list[Cell], config: PolicyConfig) -> dict:
    """Audit-24: every policy over the frozen features, scored against the outcome classes."""
    scored = score_policies(cells, config)
    return {"frozen_decisions_hash": content_hash([c.features.model_dump(mode="json") for c in cells]),
            "cells": {k: sum(c.outcome.outcome == k for c in cells) for k in ("beneficial", "harmful", "neutral")},
            "policies": scored["policies"], "mcnemar_p": scored["mcnemar_p"],
            "authorized": {p: [c.candidate_id for c, r in zip(cells, w) if r["authorized"]] for p, w in scored["walks"].items()},
            "fallback_lease": config.fallback_lease, "by_lease": lease_sensitivity(cells, config)}


def lease_sensitivity(cells: list[Cell], config: PolicyConfig) -> dict[str, dict[str, dict]]:
    """HER, BCov and harmful share of every policy with the fallback lease at 0, 1 and unlimited.

    docs/AUTHORIZER.md §5 says only "Inconclusive -> Train where the frozen fallback lease allows"; the
    count-per-episode reading is the project's, so the aggregates are shown under each lease.
    "unlimited" gives every cell a lease, which can never run out."""
    out = {}
    for label in LEASES:
        lease = len(cells) if label == "unlimited" else int(label)
        leased = PolicyConfig.model_validate({**config.model_dump(), "fallback_lease": lease})
        scored = score_policies(cells, leased)["policies"]
        out[label] = {p: {k: m[k] for k in ("her", "bcov", "harmful_share")} for p, m in scored.items()}
    return out


def shortfull(ids: list[str], methods: list[str], short: list[dict], full: list[float], verdicts: list[str],
              beneficial: list[bool], cost_ratios: list[float], band: float) -> dict:
    """ShortFull-24: short vs full agreement, rank correlation, and Pass as a detector."""
    def agree(budget: str) -> int | None:
        if any(budget not in s for s in short):
            return None  # this budget was not run for every cell
        return sum(direction(s[budget], band) == direction(f, band) for s, f in zip(short, full))
    s20 = [s["0.20"] for s in short]
    n, k = len(full), agree("0.20")
    passed = [v == "pass" for v in verdicts]
    tp = sum(p and b for p, b in zip(passed, beneficial))
    fp = sum(p and not b for p, b in zip(passed, beneficial))
    fn = sum(b and not p for p, b in zip(passed, beneficial))
    by = lambda m: [i for i, x in enumerate(methods) if x == m]  # noqa: E731
    rho = lambda idx: stats.spearman([s20[i] for i in idx], [full[i] for i in idx]) if len(idx) >= 3 else None  # noqa: E731
    return {"n": n, "agreement": k / n, "agreement_count": k, "agreement_ci": list(stats.clopper_pearson(k, n)),
            "spearman": rho(list(range(n))), "spearman_sft": rho(by("sft")), "spearman_grpo": rho(by("grpo")),
            "confusion": {"tp": tp, "fp": fp, "fn": fn, "tn": n - tp - fp - fn},
            "pass_precision": tp / (tp + fp) if tp + fp else None, "pass_recall": tp / (tp + fn) if tp + fn else None,
            "median_trial_cost_ratio": statistics.median(cost_ratios) if cost_ratios else None,  # no costs recorded
            "budget_sensitivity": {b: None if agree(b) is None else agree(b) / n for b in BUDGETS},
            "sign_reversals": [i for i, s, f in zip(ids, s20, full) if direction(s, band) * direction(f, band) < 0]}


def replay_retrospective(path: Path = DATA) -> dict:
    """All three studies recomputed from the shipped reconstructed cells."""
    doc = load(path)
    band, floor, cells = doc["neutral_band_pp"], doc["retention_floor_pp"], doc["cells"]
    audit_cells = [_cell(c, band, floor) for c in cells]
    return {
        "name": doc["name"], "note": doc["note"], "source": str(path),
        "retrospective": retrospective(cells, band, floor),
        "audit": audit_study(audit_cells, PolicyConfig(**doc["config"])),
        "shortfull": shortfull([c["id"] for c in cells], [c["method"] for c in cells], [c["short"] for c in cells],
                               [c["full"]["target"] for c in cells], [c["trial"]["verdict"] for c in cells],
                               [a.outcome.outcome == "beneficial" for a in audit_cells],
                               [c["trial"]["cost_ratio"] for c in cells], band),
        "cells": [{"id": c["id"], "family": c["family"], "method": c["method"], "target": c["matched"]["target"],
                   "worse_ifeval": min(c["matched"]["ifeval_p"], c["matched"]["ifeval_i"])} for c in cells],
    }


# --- a recorded run -----------------------------------------------------------------------


def replay_run(run_dir: str | Path, band: float = 0.5) -> dict:
    """The same diagnostics from a run directory's records; says which ones lack data."""
    run = Path(run_dir)
    if not (run / DECISIONS_FILE).is_file():
        raise BadInput(f"{run} has no decisions.jsonl: pass a run directory written by `agent run`")
    rep = audit(run)
    out = {"name": str(run), "audit": {k: rep.get(k) for k in ("ok", "problems", "frozen_decisions_head", "policies", "mcnemar_p")},
           "missing": []}
    if not rep["ok"]:
        out["missing"].append("all diagnostics: the decision ledger does not verify")
        return out
    cells = list(read_outcomes(outcomes_at(run / OUTCOMES_FILE)).values())
    full = [c for c in cells if {"target", "ifeval_p", "ifeval_i"} <= set(c.full)]
    if not full:
        out["missing"].append("retrospective: no full-run effects recorded")
    else:
        out["retrospective"] = {"cells": len(full), "positive": sum(direction(c.full["target"], band) > 0 for c in full),
                                "retention_safe_among_improving": sum(direction(c.full["target"], band) > 0 and
                                                                      retention_safe(c.full["ifeval_p"], c.full["ifeval_i"], 2.0) for c in full)}
    # an uncertain (seeded) cell has no class to detect: left out, as from every figure
    paired = [c for c in cells if "0.20" in c.short and "target" in c.full and c.trial_verdict and c.outcome != UNCERTAIN]
    if len(paired) < 3:
        out["missing"].append(f"shortfull: {len(paired)} cells have both a 20% short run and a full run (need 3)")
    else:
        out["shortfull"] = shortfull([c.candidate_id for c in paired], [c.method or "all" for c in paired], [c.short for c in paired],
                                     [c.full["target"] for c in paired], [c.trial_verdict for c in paired],
                                     [c.outcome == "beneficial" for c in paired],
                                     [c.trial_device_hours / c.full_device_hours for c in paired if c.full_device_hours], band)
    if not out["audit"]["policies"]:
        cov = rep["coverage"]
        out["missing"].append(f"audit metrics: no candidate has an outcome class ({cov['never_run']} of {cov['cells']} "
                              f"never run, {cov['trial_only']} ran only a trial); `agent retrospective --execute` "
                              "runs every candidate to the end")
    return out


# --- report.md and figures ----------------------------------------------------------------


def _pct(x) -> str:
    # Half-up at one decimal, as the paper prints (0.3125 -> 31.3%, not float-formatting's 31.2%).
    return "n/a" if x is None else f"{round(100 * x + 1e-9, 1):.1f}%"


def audit_table(audit: dict) -> list[str]:
    """The Audit table (markdown): every policy's rates under the frozen lease and, beside them,
    HER / BCov under fallback lease 0, 1 and unlimited (where the audit computed them)."""
    by_lease = audit.get("by_lease") or {}
    head = "| policy | HER | BCov | harmful share | HER 95% CI | budget on harmful (device-h) |"
    head += "".join(f" HER / BCov, lease {label} |" for label in by_lease)
    lines = [head, "|---" * (6 + len(by_lease)) + "|"]
    for name, m in audit["policies"].items():
        ci = "n/a" if m["her_ci"] is None else f"[{100 * m['her_ci'][0]:.1f}, {100 * m['her_ci'][1]:.1f}]"
        row = f"| {name} | {_pct(m['her'])} | {_pct(m['bcov'])} | {_pct(m['harmful_share'])} | {ci} | {m['budget_spent_harmful']:.2f} |"
        row += "".join(f" {_pct(v[name]['her'])} / {_pct(v[name]['bcov'])} |" for v in by_lease.values())
        lines.append(row)
    if by_lease:
        lines.append(f"(frozen fallback lease: {audit['fallback_lease']}; the lease columns re-walk every policy with "
                     "that many Inconclusive trials per episode allowed to go on to Train)")
    return lines


def _markdown(r: dict) -> str:
    lines = [f"# Replay: {r['name']}", ""]
    if "note" in r:
        lines += [f"> {r['note']}", ""]
    if "retrospective" in r and "direction_counts" in r["retrospective"]:
        rt = r["retrospective"]
        lines += ["## Retrospective-24", f"- target direction: {rt['direction_counts']}",
                  *[f"- {fam}: {v}" for fam, v in rt["by_family"].items()],
                  f"- retention-safe among improving: {rt['retention_safe_among_improving']} of {rt['improving']}", ""]
    if r.get("audit", {}).get("policies"):
        lines += ["## Audit", *audit_table(r["audit"]), ""]
    if "shortfull" in r:
        sf = r["shortfull"]
        lines += ["## ShortFull", f"- agreement {_pct(sf['agreement'])} ({sf['agreement_count']}/{sf['n']}), 95% CI "
                  f"[{_pct(sf['agreement_ci'][0])}, {_pct(sf['agreement_ci'][1])}]",
                  f"- Spearman {sf['spearman']:.3f} (SFT {sf['spearman_sft'] or float('nan'):.3f}, GRPO {sf['spearman_grpo'] or float('nan'):.3f})",
                  f"- Pass detector: {sf['confusion']}, precision {_pct(sf['pass_precision'])}, recall {_pct(sf['pass_recall'])}",
                  f"- median trial cost {_pct(sf['median_trial_cost_ratio'])} of full; budget sensitivity {sf['budget_sensitivity']}",
                  f"- sign reversals: {', '.join(sf['sign_reversals']) or 'none'}", ""]
    lines += [f"- missing: {m}" for m in r.get("missing", [])]
    return "\n".join(lines) + "\n"


def _figures(r: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    rt = r.get("retrospective", {})
    if "by_family" in rt:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for k, (key, colour) in enumerate((("up", "tab:green"), ("flat", "tab:gray"), ("down", "tab:red"))):
            ax.bar([i + 0.27 * (k - 1) for i in range(len(FAMILIES))], [rt["by_family"][f][key] for f in FAMILIES],
                   width=0.27, label=key, color=colour)
        ax.set_xticks(range(len(FAMILIES)), FAMILIES)
        ax.set_ylabel("candidates")
        ax.set_title("Target direction per family")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "target_directions.png", dpi=120)
        plt.close(fig)
        written.append(str(out / "target_directions.png"))
    if r.get("cells"):
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        ax.axhspan(-2, 2, color="tab:blue", alpha=0.12, label="[-2, 2] pp")
        for c in r["cells"]:
            ax.scatter(c["target"], c["worse_ifeval"], color="tab:orange" if c["method"] == "sft" else "tab:purple", s=18)
            ax.annotate(c["id"], (c["target"], c["worse_ifeval"]), fontsize=6)
        ax.set_yscale("symlog", linthresh=2)
        ax.set_xlabel("target change (pp)")
        ax.set_ylabel("worse-side IFEval change (pp)")
        ax.set_title("Target vs retention per cell (orange SFT, purple GRPO)")
        ax.legend(loc="lower left")
        fig.tight_layout()
        fig.savefig(out / "target_vs_ifeval.png", dpi=120)
        plt.close(fig)
        written.append(str(out / "target_vs_ifeval.png"))
    return written


def write_report(report: dict, out_dir: str | Path) -> list[str]:
    """report.md and the two figures (those the data supports) under out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(_markdown(report), encoding="utf-8")
    return [str(out / "report.md"), *_figures(report, out)]
