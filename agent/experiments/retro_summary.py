"""The executed Retrospective-24 as a document: summary.json and summary.md beside the cells.

Everything here is read back from the table's own files (ledger.json, features.jsonl,
summary.json, and the audit ledger through policies.replay.replay_run), and set beside the
paper's aggregates as the shipped replay recomputes them (`agent replay retrospective-24`).
Nothing is computed twice: the diagnostics are retro_cells.summarise_cells', the policy
metrics policies.audit's, the compatibility counts policies.features.compatibility_summary's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experience_bank.files import write_atomic
from experience_bank.decisions import Features
from policies.features import compatibility_summary


def summary_doc(out: Path) -> dict[str, Any]:
    """The whole summary of a table directory (audit included where its ledger verifies)."""
    from policies.replay import replay_retrospective, replay_run  # noqa: PLC0415

    ledger = json.loads((out / "ledger.json").read_text(encoding="utf-8"))
    table = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    feats = [Features.model_validate_json(json.dumps(json.loads(line)["features"]))
             for line in (out / "features.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    doc: dict[str, Any] = {"ledger": ledger, "compatibility_stage0": compatibility_summary(feats),
                           "table": table["summary"], "failed": table["failed"]}
    if (out / "decisions.jsonl").is_file():
        doc["audit"] = replay_run(out)["audit"]
    paper = replay_retrospective()
    doc["paper"] = {"retrospective": paper["retrospective"], "shortfull": paper["shortfull"],
                    "policies": paper["audit"]["policies"]}
    return doc


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def _ci(ci) -> str:
    return "n/a" if not ci else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _counts(c: dict[str, int]) -> str:
    return ", ".join(f"{v} ×{n}" for v, n in c.items())


def _seeds(led: dict[str, Any]) -> str:
    seeds = led.get("seeds") or [led["seed"]]
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return (f"training seeds {', '.join(map(str, seeds))}: each effect is the mean over the seeds, a cell's class "
            "is decided only where its 95 % Student-t intervals clear the class boundary (policies/outcomes.py), the "
            "between-seed spread pooled over the cells of its family and method at the same learning rate relative "
            "to the standard (retro_cells.pool_group)")


def _uncertain(t: dict[str, Any]) -> str:
    ids = t.get("uncertain") or []
    if not ids:
        return ""
    return (f" Uncertain (intervals straddle a class boundary): {len(ids)} ({', '.join(ids)}), left out of every "
            f"figure below, which rest on the other {t['n_decided']} cells.")


def _seeds_text(k: int | None) -> str:
    return "more than 50" if k is None else str(k)


def _mix_lines(t: dict[str, Any]) -> list[str]:
    """Issue 26 item 3's verdict on the classes, and the precision the classes were decided at."""
    if "mix" not in t:
        return []
    m = t["mix"]
    names = list(m["overall"])
    lines = ["## Outcome mix (issue 26, item 3: every class in every family, at least 4 of each overall)", "",
             "**" + ("Met." if m["met"] else "Not met: " + "; ".join(m["shortfalls"]) + ".") + "**", "",
             "| family | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|",
             *[f"| {fam} | " + " | ".join(str(c[k]) for k in names) + " |" for fam, c in m["by_family"].items()],
             "| all | " + " | ".join(str(m["overall"][k]) for k in names) + " |", ""]
    if t.get("precision"):
        lines += ["Precision of the pooled classes (retro_mix.precision): the between-seed spread of each group's full "
                  "runs, and the seeds per cell at which a zero effect would be decided, on the target inside the "
                  "neutral band, on IFEval above the guard. Where the seeds run are fewer, no cell of the group can be "
                  "classed neutral (or retention-safe) however small its effect.", "",
                  "| family | method | rate (x standard) | cells x seeds | SD target pp | SD IFEval pp (worse of the "
                  "two) | seeds for neutral | seeds for IFEval-safe |", "|---|---|---|---|---|---|---|---|",
                  *[f"| {p['family']} | {p['method']} | {p['relative_rate']:g} | "
                    f"{', '.join(p['ids'])} x {p['seeds']} | {p['sd_target_pp']:.2f} | "
                    f"{p['sd_ifeval_pp']:.2f} | {_seeds_text(p['seeds_to_decide_neutral'])} | "
                    f"{_seeds_text(p['seeds_to_decide_retention'])} |" for p in t["precision"]], ""]
    return lines + _second_stage_lines(t.get("second_stage"))


def _second_stage_lines(stage: dict[str, Any] | None) -> list[str]:
    """Which cells the second stage gave more seeds, and the first stage's mix beside the table's."""
    if not stage:
        return []
    added = {}
    for cid, k in stage["seeds"].items():
        added.setdefault(k, []).append(cid)
    first = stage.get("first_stage_mix") or {}
    return [f"Second stage (retro_mix.second_stage, Stein's two-stage design): after {stage['first_seeds']} seeds, "
            "the pool groups whose first-stage spread needed more seeds, at most "
            f"{stage['most_seeds']}, to decide a zero effect ran them: "
            + ("; ".join(f"{', '.join(ids)} at {k}" for k, ids in sorted(added.items())) or "none") + ". "
            + (f"At the first stage the classes were {first['overall']}"
               + ("" if first.get("met") else f" ({'; '.join(first['shortfalls'])})") + "." if first else ""), ""]


def summary_markdown(doc: dict[str, Any]) -> str:
    led, t, comp = doc["ledger"], doc["table"], doc["compatibility_stage0"]
    base = f" (base weights {led['base_sha256'][:12]})" if led.get("base_sha256") else ""
    lines = [f"# Retrospective-24, executed on world {led['world']}{base}", "",
             f"Catalogue {led.get('catalogue_sha256', 'n/a')[:16]}, frozen features {led['features_sha256'][:16]}, "
             f"{_seeds(led)}. Effects are intervention minus control; the control: {led['control']}.", "",
             f"Cells done: {t.get('n_cells', 0)}; failed: {len(doc['failed'])}"
             + (f" ({', '.join(doc['failed'])})" if doc["failed"] else "") + "." + _uncertain(t), "",
             "## Compatibility at stage 0 (the 24 records against the base)", "",
             "| | counts |", "|---|---|", f"| A | {_counts(comp['A'])} |",
             *[f"| {name} | {_counts(c)} |" for name, c in comp["fields"].items()],
             f"| H = 1 | {comp['H']} ({'; '.join(comp['conflicts']) or 'none'}) |", ""]
    if not t:
        return "\n".join(lines + ["(no finished cell yet)", ""])
    sf = t["shortfull"]
    lines += ["## Retrospective", "", f"Direction counts (positive / neutral / negative): "
              f"{t['direction_counts']['positive']} / {t['direction_counts']['neutral']} / "
              f"{t['direction_counts']['negative']}; retention-safe among improving: "
              f"{t['retention_safe_among_improving']}; outcome classes {t['outcome_classes']}"
              + (f" (pooled intervals; on each cell's own spread: {t['outcome_classes_per_cell']})"
                 if t.get("outcome_classes_per_cell") else "") + ".", "",
              "| family | up | flat | down |", "|---|---|---|---|",
              *[f"| {f} | {c['up']} | {c['flat']} | {c['down']} |" for f, c in sorted(t["by_family"].items())], "",
              "## ShortFull (20 % trial vs full run)", "",
              f"Agreement {_pct(sf['agreement'])} % (Clopper-Pearson 95 % {_ci(sf['agreement_ci'])}); Spearman "
              f"all {_num(sf['spearman'])}, SFT {_num(sf['spearman_sft'])}, GRPO {_num(sf['spearman_grpo'])}; "
              f"confusion (Pass as a detector of beneficial) {sf['confusion']}; Pass precision "
              f"{_pct(sf['pass_precision'])} %, recall {_pct(sf['pass_recall'])} %.", ""]
    lines += _mix_lines(t)
    paper = doc["paper"]
    lines += ["## Audit of every policy on these cells, beside the paper", "",
              "| policy | HER % (95 % CI) | BCov % (95 % CI) | harmful share % | paper HER % | paper BCov % |",
              "|---|---|---|---|---|---|"]
    ours = (doc.get("audit") or {}).get("policies") or {}
    for name, m in ours.items():
        p = paper["policies"].get(name, {})
        lines.append(f"| {name} | {_pct(m['her'])} {_ci(m['her_ci'])} | {_pct(m['bcov'])} {_ci(m['bcov_ci'])} | "
                     f"{_pct(m['harmful_share'])} | {_pct(p.get('her'))} | {_pct(p.get('bcov'))} |")
    if not ours:
        lines.append("| (no audit: the table's decision ledger is missing or no cell has an outcome) | | | | | |")
    psf, pr = paper["shortfull"], paper["retrospective"]
    pdc = pr["direction_counts"]
    lines += ["", "Paper (recomputed by `agent replay retrospective-24` from the shipped cells): direction counts "
              f"{pdc['positive']} / {pdc['neutral']} / {pdc['negative']}, retention-safe among improving "
              f"{pr['retention_safe_among_improving']}/{pr['improving']}; ShortFull agreement {_pct(psf['agreement'])} % "
              f"{_ci(psf['agreement_ci'])}, Spearman all {_num(psf['spearman'])}, SFT {_num(psf['spearman_sft'])}, "
              f"GRPO {_num(psf['spearman_grpo'])}; confusion {psf['confusion']}.", ""]
    return "\n".join(lines)


def write_summary(out: Path) -> dict[str, Any]:
    """Write out/retrospective.json and out/retrospective.md; return the document."""
    doc = summary_doc(out)
    write_atomic(out / "retrospective.json", json.dumps(doc, indent=1, sort_keys=True, default=str))
    write_atomic(out / "retrospective.md", summary_markdown(doc))
    return doc
