"""The pure aggregation of `agent compare`: per policy and per pair of policies, over the
EpisodeResults that agent/experiments/episodes.py reads from finished episodes. No file, no
process: compare.py runs the episodes and calls `summarise`; compare_output.py renders it."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

from policies.stats import paired_t_interval, sign_flip_test
from agent.experiments.episodes import IFEVAL_METRICS, PAIRING_KEYS, EpisodeResult, endpoint_mean, unit, where_unpromoted


def cache_summary(episodes: list[EpisodeResult]) -> dict[str, Any]:
    """Hit ratio and wall-clock saved over the finished episodes."""
    uses = [e["cache"] for e in episodes if e.get("status") == "done" and "cache" in e]
    hits, charges = sum(u["hits"] for u in uses), sum(u["charges"] for u in uses)
    return {"hits": hits, "charges": charges, "hit_ratio": hits / charges if charges else None,
            "saved_s": round(sum(u["saved_s"] for u in uses), 3)}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _sd(xs: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def trajectory_auc(ep: EpisodeResult) -> float | None:
    """Time-average of the endpoint mean over the budget: the area under the step function
    score(device-hours spent), held after the last event up to the budget, divided by the span."""
    span = max(ep["budget_h"], ep["trajectory"][-1][0])
    points = [(h, sum(t.get(f, math.nan) for f in ep["families"]) / len(ep["families"])) for h, t in ep["trajectory"]]
    if span <= 0 or any(math.isnan(v) for _, v in points):
        return None
    area = sum(v * (nxt - h) for (h, v), (nxt, _) in zip(points, points[1:] + [(span, 0.0)]))
    return area / span


def _policy_summary(eps: list[EpisodeResult], families: list[str]) -> dict[str, Any]:
    def col(fn) -> list[float]:
        return [v for v in (fn(e) for e in eps) if v is not None]

    endpoints = col(endpoint_mean)
    return {
        "n": len(eps), "seeds": [e["seed"] for e in eps],
        "endpoint_mean": _mean(endpoints), "endpoint_sd": _sd(endpoints),
        "endpoint_adoption_mean": _mean(col(lambda e: endpoint_mean(e, "endpoint_adoption"))),
        "per_capability": {f: _mean(col(lambda e, f=f: e["endpoint"].get(f))) for f in families},
        "ifeval": {k: _mean(col(lambda e, k=k: e["ifeval"].get(k))) for k in IFEVAL_METRICS},
        # the initial parent is scored on adoption only, so the change is read there
        "ifeval_drop_vs_initial": {k: _mean(col(lambda e, k=k: None if None in (e["ifeval_adoption"].get(k),
                                                                                 e["ifeval_initial"].get(k))
                                                 else e["ifeval_adoption"][k] - e["ifeval_initial"][k]))
                                   for k in IFEVAL_METRICS},
        "promotions": sum(e["promotions"] for e in eps), "authorizations": sum(e["authorizations"] for e in eps),
        "promotion_rate": (sum(e["promotions"] for e in eps) / sum(e["authorizations"] for e in eps)
                           if sum(e["authorizations"] for e in eps) else None),
        "trajectory_auc": _mean(col(trajectory_auc)), "wasted_h": _mean(col(lambda e: e["wasted_h"])),
        "spent_h": _mean(col(lambda e: e["spent_h"])), "unpromoted": where_unpromoted(eps),
    }


def _pair(a: str, b: str, by_seed: dict[str, dict[int | str, EpisodeResult]], metric) -> dict[str, Any]:
    seeds = sorted(s for s in set(by_seed[a]) & set(by_seed[b])
                   if metric(by_seed[a][s]) is not None and metric(by_seed[b][s]) is not None)
    xa, xb = [metric(by_seed[a][s]) for s in seeds], [metric(by_seed[b][s]) for s in seeds]
    diffs = [x - y for x, y in zip(xa, xb)]
    out: dict[str, Any] = {"seeds": seeds, "diffs": diffs, "mean_diff": None, "ci95": None, "sign_flip_p": None,
                           "ahead": sum(d > 0 for d in diffs), "tied": sum(d == 0 for d in diffs),
                           "behind": sum(d < 0 for d in diffs)}
    if seeds:
        out["mean_diff"] = sum(diffs) / len(seeds)
    if len(seeds) >= 2:  # one pair has no sign-flip distribution: its p stays None
        out["sign_flip_p"] = sign_flip_test(diffs)
    if len(seeds) >= 2 and len(set(diffs)) > 1:
        _, lo, hi = paired_t_interval(xa, xb)
        out["ci95"] = [lo, hi]
    elif len(seeds) >= 2:
        out["ci95"] = [out["mean_diff"], out["mean_diff"]]  # identical differences: a zero-width interval
    return out


def unpaired_with(d: dict[str, Any], others: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Of one seed's other episodes' digests (by job name), those whose pairing values differ from
    digest `d`'s, with the keys that differ (what pairing_check will find in that seed's tables)."""
    out = {name: differing([d["pairing"], o["pairing"]]) for name, o in others.items()}
    return {name: keys for name, keys in out.items() if keys}


def unpaired_units(a: str, b: str, by_seed: dict[str, dict[int | str, EpisodeResult]]) -> dict[str, list[str]]:
    """The units both policies finished where their manifest values differ (`differing`),
    with the keys that differ."""
    found = {str(u): differing([by_seed[a][u]["pairing"], by_seed[b][u]["pairing"]])
             for u in sorted(set(by_seed[a]) & set(by_seed[b]), key=str)}
    return {u: keys for u, keys in found.items() if keys}


def _pair_stats(a: str, b: str, by_seed: dict[str, dict[int | str, EpisodeResult]], strict: bool) -> dict[str, Any]:
    """One pair's differences; `strict`: over only the units where the two are properly paired."""
    unpaired = unpaired_units(a, b, by_seed)
    if strict:
        by_seed = {p: {u: e for u, e in by_seed[p].items() if str(u) not in unpaired} for p in (a, b)}
    return {"endpoint": _pair(a, b, by_seed, endpoint_mean),
            "endpoint_adoption": _pair(a, b, by_seed, lambda e: endpoint_mean(e, "endpoint_adoption")),
            "trajectory_auc": _pair(a, b, by_seed, trajectory_auc),
            "wasted_h": _pair(a, b, by_seed, lambda e: e["wasted_h"]),
            "unpaired": {} if strict else unpaired}


def summarise(episodes: list[EpisodeResult], strict: bool = False) -> dict[str, Any]:
    """Per policy and per pair of policies, over finished episodes (failed ones are listed apart).
    A pair's `unpaired`: its units whose manifest values differ; `strict`: each pair over the other
    units only (the pooled tables need every unit paired: `pairing`)."""
    ok = [e for e in episodes if e["status"] == "done"]
    failed = [{k: e[k] for k in ("policy", "seed", "world_seed", "status", "error") if k in e}
              for e in episodes if e["status"] != "done"]
    policies = list(dict.fromkeys(e["policy"] for e in episodes))
    families = sorted({f for e in ok for f in e["families"]})
    by_seed = {p: {unit(e): e for e in ok if e["policy"] == p} for p in policies}
    pairs = {f"{a}_vs_{b}": _pair_stats(a, b, by_seed, strict) for a, b in itertools.combinations(policies, 2)}
    return {"policies": {p: _policy_summary(list(by_seed[p].values()), families) for p in policies},
            "pairs": pairs, "ahead_of_all": ahead_of_all(by_seed, policies),
            "falls_behind": falls_behind(by_seed, policies), "families": families, "failed": failed,
            "pairing": pairing_check(ok), "cache": cache_summary(ok)}


def ahead_of_all(by_seed: dict[str, dict[int | str, EpisodeResult]], policies: list[str]) -> dict[str, Any]:
    """Over the pairing units where every policy has a finished endpoint: in how many each policy's
    endpoint is strictly above every other policy's (issue 27's aim reads "ahead of every other
    policy in most paired seeds"; the per-pair ahead / tied / behind counts are in `pairs`)."""
    common = set.intersection(*(set(by_seed[p]) for p in policies)) if policies else set()
    score = {u: {p: endpoint_mean(by_seed[p][u]) for p in policies} for u in common}
    units = [u for u, s in score.items() if None not in s.values()]
    return {"units": len(units),
            "per_policy": {p: sum(all(score[u][p] > score[u][q] for q in policies if q != p) for u in units)
                           for p in policies}}


def falls_behind(by_seed: dict[str, dict[int | str, EpisodeResult]], policies: list[str]) -> dict[str, Any]:
    """Where each policy loses, over the units every policy finished: in how many its endpoint is
    below another's, by how much below the best on average there (pp), and the cards that a policy
    ahead of it promoted and it did not (in how many units): the updates it missed, beside where it
    spent without promoting (`unpromoted`)."""
    common = set.intersection(*(set(by_seed[p]) for p in policies)) if policies else set()
    score = {u: {p: endpoint_mean(by_seed[p][u]) for p in policies} for u in common}
    units = sorted((u for u, s in score.items() if None not in s.values()), key=str)
    out: dict[str, Any] = {}
    for p in policies:
        gaps, missed = [], {}
        for u in units:
            ahead = [q for q in policies if score[u][q] > score[u][p]]
            if not ahead:
                continue
            gaps.append(max(score[u][q] for q in ahead) - score[u][p])
            theirs = {c for q in ahead for c in by_seed[q][u].get("promoted", [])}
            for card in sorted(theirs - set(by_seed[p][u].get("promoted", []))):
                missed[card] = missed.get(card, 0) + 1
        out[p] = {"units": len(units), "behind": len(gaps), "mean_gap_pp": _mean(gaps),
                  "missed": dict(sorted(missed.items(), key=lambda kv: (-kv[1], kv[0])))}
    return out


def differing(pairings: list[dict[str, Any]]) -> list[str]:
    """The PAIRING_KEYS on which these episodes' manifest values (their `pairing`) are not all equal:
    what decides whether episodes pair, for pairing_check and for one episode as it ends."""
    return [k for k in PAIRING_KEYS if len({json.dumps(p.get(k), sort_keys=True) for p in pairings}) > 1]


def pairing_check(episodes: list[EpisodeResult]) -> dict[str, Any]:
    """Per seed (pairing unit), the manifest values that differ across policies (empty = properly paired)."""
    problems: dict[str, Any] = {}
    for seed in sorted({unit(e) for e in episodes}, key=str):
        group = [e for e in episodes if unit(e) == seed]
        for key in differing([e["pairing"] for e in group]):
            problems.setdefault(str(seed), {})[key] = {e["policy"]: e["pairing"].get(key) for e in group}
    return {"paired": not problems, "mismatches": problems}
