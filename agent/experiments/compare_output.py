"""compare.md, compare.json and the figures of `agent compare`, from `compare_stats.summarise`'s output."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from agent.experiments.episodes import IFEVAL_METRICS, PAIRING_KEYS, endpoint_mean, unit


def _f(v: Any, nd: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_f(x, nd) for x in v) + "]"
    return str(v)


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(_f(c) for c in cells) + " |"


def _cache_line(cache: dict[str, Any] | None) -> str:
    if not cache or not cache["charges"]:
        return "Run cache: no charges recorded."
    return (f"Run cache: {cache['hits']} of {cache['charges']} charges served from it (hit ratio "
            f"{cache['hit_ratio']:.1%}), {cache['saved_s']:.0f} s of wall-clock not spent again; every charge is "
            "still paid at its nominal cost, so the decisions are those of an uncached run.")


def _code_line(code: dict[str, Any] | None) -> str:
    if not code:
        return ""
    libs = ", ".join(f"{k} {v}" for k, v in sorted(code.get("libraries", {}).items()))
    return f"Its episodes ran at episode code {str(code.get('episode', '?'))[:12]} ({libs})."


def _finished_line(finished: list | None) -> str:
    """` Finished so far: ...`: each world's episodes with a digest, of the (policy, seed) pairs asked for,
    and which worlds the tables leave out for want of a seed every policy has finished."""
    if not finished:
        return ""
    def world(name: str, k: int, n: int, in_tables: bool = True) -> str:  # rows written before the flag have three
        return f"{name}, {k} of {n} episodes" + ("" if in_tables else " (no seed with every policy yet: not in these tables)")

    return " Finished so far: " + "; ".join(world(*row) for row in finished) + "."


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    fams, ifk = summary["families"], list(IFEVAL_METRICS)
    under_way = (["A measurement under way: this report covers only the seeds every policy had finished "
                  f"(`agent compare --report`); nothing was run for it. {_code_line(meta.get('measured_code'))}"
                  f"{_finished_line(meta.get('finished'))}", ""]
                 if meta.get("report_only") else [])
    lines = ["# Paired policy comparison", "", *under_way,
             f"{_worlds_line(meta)}Seeds {meta['seeds']}; budget {meta['budget'] or '(config default)'}; config {meta['config'] or '(defaults)'}; "
             f"wall-clock {meta['wall_s']:.0f} s. Endpoint = the final parent on the held-out test split, mean "
             f"over the target capabilities {fams}; 'adoption' = the same on the split the gate selected on "
             "(optimistic). IFEval at the end is on the test split; AUC follows the adoption split.", "",
             _cache_line(summary.get("cache")), "", *_fitted_lines(meta),
             f"Pairing (manifest values equal across policies per seed: {', '.join(PAIRING_KEYS)}): "
             f"**{'ok' if summary['pairing']['paired'] else 'MISMATCH'}**", "", "## Per policy", "",
             _row(["policy", "n", "endpoint (test)", "sd", "adoption"] + fams + ifk
                  + ["promoted/authorized", "AUC", "wasted h", "spent h"]),
             "|" + "---|" * (9 + len(fams) + len(ifk))]
    for p, s in summary["policies"].items():
        lines.append(_row([p, s["n"], s["endpoint_mean"], s["endpoint_sd"], s["endpoint_adoption_mean"]]
                          + [s["per_capability"][f] for f in fams]
                          + [s["ifeval"][k] for k in ifk] + [f"{s['promotions']}/{s['authorizations']}",
                                                             s["trajectory_auc"], s["wasted_h"], s["spent_h"]]))
    lines += ["", "IFEval change vs the initial parent (pp, mean over seeds, adoption split): "
              + "; ".join(f"{p} " + "/".join(_f(s["ifeval_drop_vs_initial"][k]) for k in ifk)
                          for p, s in summary["policies"].items()), "",
              *_ahead_line(summary),
              "## Per pair (first minus second; paired-t 95% CI; exact sign-flip p over 2^n; the first's endpoint "
              "ahead / tied / behind over the pairs)", "",
              *_pair_table(summary["pairs"])]
    lines += _pairs_so_far(summary)
    lines += _per_world(summary)
    lines += _falls_behind(summary)
    lines += _unpromoted(summary)
    if summary["failed"]:
        lines += ["", "## Failed episodes (excluded from the statistics)", ""]
        lines += [f"- {f['policy']} world seed {f.get('world_seed', 0)} seed {f['seed']}: {f['status']}: {f.get('error', '')[:300]}" for f in summary["failed"]]
    lines += ["", "![endpoint per policy](endpoint.png)", "", "![trajectories](trajectories.png)", ""]
    return "\n".join(lines)


def _pair_table(pairs: dict[str, Any], unpaired: bool = False) -> list[str]:
    """One row per pair of policies: endpoint, adoption, AUC and wasted-hours differences (`unpaired`:
    and how many of its units the two are not properly paired on)."""
    extra = ["not paired"] if unpaired else []
    lines = [_row(["pair", "n", "endpoint diff", "95% CI", "p", "ahead/tied/behind", "adoption diff", "AUC diff",
                   "AUC p", "wasted h diff", "wasted h CI", "wasted h p"] + extra), "|" + "---|" * (12 + len(extra))]
    for name, pr in pairs.items():
        e, a, w = pr["endpoint"], pr["trajectory_auc"], pr["wasted_h"]
        lines.append(_row([name, len(e["seeds"]), e["mean_diff"], e["ci95"], _f(e["sign_flip_p"], 4),
                           "/".join(str(e[k]) for k in ("ahead", "tied", "behind")),
                           pr["endpoint_adoption"]["mean_diff"], a["mean_diff"], _f(a["sign_flip_p"], 4), w["mean_diff"],
                           w["ci95"], _f(w["sign_flip_p"], 4)] + ([len(pr["unpaired"])] if unpaired else [])))
    return lines


def _mismatch_lines(mismatches: dict[str, Any]) -> list[str]:
    """Per unit, each manifest value that differs, with the policies that ran at each value."""
    lines = []
    for u, keys in mismatches.items():
        parts = []
        for key, by_policy in keys.items():
            groups: dict[str, list[str]] = {}
            for policy, value in by_policy.items():
                groups.setdefault(str(value)[:12], []).append(policy)
            parts.append(f"{key} " + " / ".join(f"{v} ({', '.join(ps)})" for v, ps in groups.items()))
        lines.append(f"- {u}: " + "; ".join(parts))
    return lines


def _pairs_so_far(summary: dict[str, Any]) -> list[str]:
    """A report under way: each pair over every (world, seed) both policies finished (compare._pairs_so_far)."""
    so_far = summary.get("pairs_so_far")
    if not so_far:
        return []
    lines = ["", "## Per pair so far (every world and seed both policies finished, not only the seeds every policy "
                 "finished; the same columns)", "", *_pair_table(so_far["pairs"], unpaired=True)]
    if so_far["mismatches"]:
        lines += ["", "Not properly paired: the units below, where the policies' episodes differ in a manifest value. "
                      "A different `candidates_sha256` at one `library_version` means the library's records differ: "
                      "a record's hash covers its evidence and its provenance (the source run's weights and "
                      "generations), so one world's seed bank built on two machines that round differently gives "
                      "two. The pairs that have such units, over only the units they have properly paired:", "",
                  *_pair_table({k: v for k, v in so_far["strict"].items() if so_far["pairs"][k]["unpaired"]}), "",
                  *_mismatch_lines(so_far["mismatches"])]
    return lines


def _ahead_line(summary: dict[str, Any]) -> list[str]:
    """How often each policy's endpoint was strictly above every other's (nothing while no pair is complete)."""
    ahead = summary["ahead_of_all"]
    if not ahead["units"]:
        return []
    return [f"Ahead of every other policy on the test endpoint, of the {ahead['units']} pairs every policy finished: "
            + "; ".join(f"{p} {k}" for p, k in ahead["per_policy"].items()) + ".", ""]


def _fitted_lines(meta: dict[str, Any]) -> list[str]:
    """Which worlds each world's learned models were fitted on (agent compare --fit-from), else nothing."""
    fitted = meta.get("fitted") or {}
    fitted = fitted if meta.get("world_seeds") else ({str(meta.get("world_seed") or 0): fitted} if fitted else {})
    if not fitted:
        return []
    parts = [f"world {ws}: fitted on world seeds {f['source_world_seeds']}"
             + (f", go/no-go n={f['gonogo_n_train']} threshold {f['gonogo_threshold']} (alpha {f['alpha']})"
                if "gonogo_sha256" in f else "") for ws, f in sorted(fitted.items()) if f]
    return [f"Learned models (leave-one-world-out; the extrapolation reaches every policy's trial): {'; '.join(parts)}.",
            ""]


def _worlds_line(meta: dict[str, Any]) -> str:
    if meta.get("world_seeds"):
        return (f"Worlds {meta['world_seeds']} pooled: a pair is (world seed, run seed); each world's own "
                "comparison is in world-<N>/. ")
    return f"World seed {meta['world_seed']}. " if meta.get("world_seed") else ""


def _per_world(summary: dict[str, Any]) -> list[str]:
    """Each world's endpoint per policy and endpoint differences per pair, beside the pooled tables."""
    worlds = summary.get("per_world") or {}
    if not worlds:
        return []
    policies, pairs = list(summary["policies"]), list(summary["pairs"])
    lines = ["", "## Per world (endpoint on the test split; pair: mean difference, sign-flip p)", "",
             _row(["world seed"] + policies + pairs), "|" + "---|" * (1 + len(policies) + len(pairs))]
    for ws, s in worlds.items():
        lines.append(_row([ws] + [s["policies"].get(p, {}).get("endpoint_mean") for p in policies]
                          + [f"{_f(s['pairs'][pr]['endpoint']['mean_diff'])} (p {_f(s['pairs'][pr]['endpoint']['sign_flip_p'], 4)})"
                             if pr in s["pairs"] else None for pr in pairs]))
    return lines


def _falls_behind(summary: dict[str, Any]) -> list[str]:
    """Where each policy loses (compare_stats.falls_behind); nothing while no unit has every policy."""
    rows = summary.get("falls_behind") or {}
    if not any(r["units"] for r in rows.values()):
        return []
    lines = ["", "## Where each policy falls behind (the seeds every policy finished)", "",
             _row(["policy", "behind another in", "mean gap to the best there (pp)",
                   "cards a policy ahead promoted and it did not (x seeds)"]), "|---|---|---|---|"]
    for p, r in rows.items():
        missed = ", ".join(c + (f" x{n}" if n > 1 else "") for c, n in r["missed"].items()) or "–"
        lines.append(_row([p, f"{r['behind']} of {r['units']}", r["mean_gap_pp"], missed]))
    return lines


def _unpromoted(summary: dict[str, Any]) -> list[str]:
    """Where each policy spent device-hours without promoting: per cause (episodes.cause), the
    decisions, their device-hours summed over the policy's episodes, and the cards (x times)."""
    rows = [(p, c, v) for p, s in summary["policies"].items() for c, v in s.get("unpromoted", {}).items()]
    if not rows:
        return []
    lines = ["", "## Where each policy spends without promoting (summed over its episodes)", "",
             _row(["policy", "cause", "decisions", "device-h", "cards (x times)"]), "|---|---|---|---|---|"]
    for p, c, v in rows:
        cards = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(v["cards"].items())) or "(not recorded)"
        lines.append(_row([p, c, v["n"], v["hours"], cards]))
    return lines


def figures(out: Path, summary: dict[str, Any], episodes: list[dict]) -> None:
    import matplotlib  # noqa: PLC0415 (slow import, only when writing)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    policies = list(summary["policies"])
    ok = [e for e in episodes if e["status"] == "done"]
    fig, ax = plt.subplots(figsize=(1.6 * len(policies) + 2, 4))
    for seed in sorted({unit(e) for e in ok}, key=str):  # one grey line per pair joins its paired episodes
        pts = [(i, endpoint_mean(e)) for i, p in enumerate(policies) for e in ok
               if e["policy"] == p and unit(e) == seed and endpoint_mean(e) is not None]
        ax.plot([x for x, _ in pts], [y for _, y in pts], "-o", color="grey", alpha=0.5, lw=1)
    ax.scatter(range(len(policies)), [summary["policies"][p]["endpoint_mean"] or math.nan for p in policies],
               marker="_", s=600, color="black", zorder=3, label="mean")
    ax.set_xticks(range(len(policies)), policies, rotation=20)
    ax.set_ylabel("endpoint: mean target score (pp)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "endpoint.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    colours = dict(zip(policies, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3))
    for e in ok:
        xs, ys = [h for h, _ in e["trajectory"]], [sum(t.get(f, math.nan) for f in e["families"]) / len(e["families"])
                                                    for _, t in e["trajectory"]]
        ax.step(xs + [max(e["budget_h"], xs[-1])], ys + ys[-1:], where="post", color=colours[e["policy"]], alpha=0.7,
                label=e["policy"] if unit(e) == min((unit(x) for x in ok if x["policy"] == e["policy"]), key=str)
                else None)
    ax.set_xlabel("device-hours spent")
    ax.set_ylabel("current parent: mean target score (pp)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "trajectories.png", dpi=110)
    plt.close(fig)


def write_outputs(out: Path, summary: dict[str, Any], episodes: list[dict], meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps({"meta": meta, "summary": summary, "episodes": episodes},
                                                 indent=1, sort_keys=True), encoding="utf-8")
    (out / "compare.md").write_text(markdown(summary, meta), encoding="utf-8")
    figures(out, summary, episodes)
