"""Does GRPO move its target when it trains only on prompts that give it a gradient? A pilot.

    AGENT_CACHE=/work/cache/agent PYTHONPATH=. OMP_NUM_THREADS=1 python bench/grpo_filter.py \\
        --world-seed 0 --cards G05 G01 G09 --seeds 0 1 --out $AGENT_CACHE/measure/grpo-filter-w0

On the v4 catalogue most GRPO groups give no gradient (bench/grpo_signal.py: 34-94 % of a card's
groups have all-equal rewards) and the trials' rewards do not rise. Each card here runs its full
length from the world's base twice per training seed: on its rows as the catalogue builds them
(`as-is`) and on rows kept to prompts whose group, sampled from the base as the card samples it,
gets rewards that differ (`informative`: agent/world/examples.informative_examples). Both are real
TRL runs through trainers.train and the run cache; each model is scored as a retrospective cell
is (agent/experiments/retrospective.WorldPorts.evaluate), by default on the adoption split as a full
run is (1,000 target items, sql/target its whole split; 1,000 IFEval prompts), against the base on
the same items.

An SFT card (a recipe tried at another learning rate, `--lr`, or with another card's recipe,
`--recipe-of S12`: the aggressive cards' schedule on this card's data) runs as-is only: the filter is
GRPO's. Reported per (card, variant, seed): the share of candidate prompts that were informative, the
reward over the first and last quarter of the run's logged steps and its groups with no signal
(trainers.run.reward_signal), the target and IFEval prompt-strict change against the base (pp),
and the wall time; then per (card, variant) the mean and between-seed SD of the target change.
Resumable: every finished (card, variant, seed) is kept in OUT/<card>/<variant>-s<seed>.<split>.json;
a run already trained is served by the run cache when it is scored on another split.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experience_bank.errors import BadInput  # noqa: E402

VARIANTS = ("as-is", "informative")


def _run(ports: Any, card: Any, variant: str, seed: int, out: Path, split: str) -> dict[str, Any]:
    """One full run of `card` from the base on its `variant` rows, scored against the base."""
    import trainers
    from agent.world.examples import card_rewards, informative_examples, parent_sampler

    world, base = ports.world, ports.world.base_dir
    card = with_filter(card, variant == "informative")
    start = time.perf_counter()
    filt: dict[str, int] = {}
    if card.data.prompt_filter is not None:
        sampler = parent_sampler(base, max_new_tokens=card.hparams.max_completion_length or 64, seed=seed)
        rows, filt = informative_examples(card, world, seed, sampler)
    else:
        rows = ports.runner.examples(card, base, seed)
    rows_s = time.perf_counter() - start
    result = trainers.train(card, base, rows, out_dir=str(out / "run"), run_key=f"grpo-filter-{card.id}-{variant}-s{seed}",
                            reward_funcs=card_rewards(card), seed=seed, threads=ports.runner.threads,
                            cache=ports.runner.cache)
    scores = ports.evaluate(result.checkpoint, card.family, split, str(out / f"evals-{split}"))
    log = dict(result.log)
    return {"card": card.id, "variant": variant, "seed": seed, "split": split, "filter": filt, "rows_s": round(rows_s, 1),
            "train_s": round(result.wall_seconds, 1), "scores": scores,
            **{k: log.get(k) for k in ("reward_early", "reward_late", "no_signal")}}


def _with(card: Any, part: str, changes: dict[str, Any]) -> Any:
    """The card with `changes` in one of its parts (`hparams`, `data`), validated as any card is."""
    from experience_bank.cards import CandidateCard

    body = card.model_dump()
    body[part] |= changes
    return CandidateCard.model_validate(body)


def with_lr(card: Any, lr: float) -> Any:
    """The card at another learning rate."""
    return _with(card, "hparams", {"learning_rate": lr})


RECIPE = ("learning_rate", "lr_scheduler", "warmup_ratio", "beta", "temperature")
"""What `--recipe-of` takes from the donor card: its optimiser schedule and, for GRPO, its KL weight and
sampling temperature; the data, steps, rewards and adapter stay the card's own."""


def with_recipe(card: Any, donor: Any) -> Any:
    """The card trained with the donor card's recipe (RECIPE); the donor must be of the card's method
    (an SFT recipe has no KL weight or temperature)."""
    if donor.method != card.method:
        raise BadInput(f"--recipe-of {donor.id} is a {donor.method} card and {card.id} a {card.method} card: "
                       f"give a donor of the same method")
    return _with(card, "hparams", {k: getattr(donor.hparams, k) for k in RECIPE})


def with_filter(card: Any, on: bool) -> Any:
    """The card with the prompt filter on or off (a GRPO card; an SFT card is returned as it is).
    Catalogue v6's GRPO cards ask for it, so "as-is" (v4/v5's rows) is the card with it off."""
    if card.method != "grpo":
        return card
    return _with(card, "data", {"prompt_filter": "reward_spread" if on else None})


def _kept(path: Path, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`compute()`, kept at `path` (written whole, renamed into place) and read from there next time."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".tmp").write_text(json.dumps(compute(), indent=1, sort_keys=True))
        path.with_suffix(".tmp").replace(path)
    return json.loads(path.read_text())


def _row(name: str, variant: str, seed: int, r: dict[str, Any], base: dict[str, float]) -> str:
    f = r["filter"]
    share = f"{f['informative']}/{f['candidates']}" if f else "-"
    reward = "n/a" if r["reward_early"] is None else f"{r['reward_early']:.3f} -> {r['reward_late']:.3f}"
    silent = "n/a" if r["no_signal"] is None else f"{100 * r['no_signal']:.0f} %"
    return (f"| {name} | {variant} | {seed} | {share} | {reward} | {silent} | {r['scores']['target'] - base['target']:+.2f} "
            f"| {r['scores']['prompt_strict'] - base['prompt_strict']:+.2f} | {r['rows_s']:.0f} + {r['train_s']:.0f} |")


def summary(rows: Sequence[dict[str, Any]], base: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Per (card, variant): seeds, mean and between-seed SD of the target change against the base."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["card"], r["variant"]), []).append(r)
    out = []
    for (card, variant), rs in sorted(groups.items()):
        d = [r["scores"]["target"] - base[card]["target"] for r in rs]
        out.append({"card": card, "variant": variant, "seeds": len(rs), "mean": statistics.fmean(d),
                    "sd": statistics.stdev(d) if len(d) > 1 else None})
    return out


def _variant(world: Any, cid: str, lr: float | None, donor: str | None) -> tuple[str, Any]:
    """(name, card) of card `cid` as asked: its own, at another rate, or with another card's recipe."""
    from agent.world.catalogue import card_by_id

    card = card_by_id(world, cid)
    if donor is not None:
        card, cid = with_recipe(card, card_by_id(world, donor)), f"{cid}@{donor}"
    if lr is not None:
        card, cid = with_lr(card, lr), f"{cid}@lr{lr:g}"
    return cid, card


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="default")
    p.add_argument("--world-seed", type=int, default=0)
    p.add_argument("--cards", nargs="+", default=["G05", "G01", "G09"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--out", type=Path, required=True, help="run directory (outside the work tree)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--split", default="adoption", choices=("validation", "adoption"),
                   help="where the models are scored: adoption (default; 1,000 target items and IFEval prompts, as a "
                        "retrospective's full runs) or validation (200, as a trial)")
    p.add_argument("--lr", type=float, default=None, help="run the cards at this learning rate instead of their own "
                   "(a recipe being tried: its runs and rows are kept under OUT/<card>@lr<LR>/)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                   help="which GRPO rows to run (default both; catalogue v6's cards train on `informative`)")
    p.add_argument("--recipe-of", default=None, metavar="CARD",
                   help="run the cards with this card's recipe (learning rate, schedule, warm-up; for GRPO also KL "
                        "weight and temperature), e.g. S12 or G03, the aggressive cards; kept under OUT/<card>@<CARD>/")
    args = p.parse_args(argv)
    from agent.experiments.retrospective import WorldPorts
    from agent.world.embedded import ensure_world
    from agent.world.runner import CardRunner

    try:
        world = ensure_world(args.size, world_seed=args.world_seed)
        ports = WorldPorts(world)
        ports.runner = CardRunner(world, threads=args.threads)
        cards = [_variant(world, c, args.lr, args.recipe_of) for c in args.cards]
    except KeyError as e:
        print(f"error: no card {e} in the catalogue: pass card ids such as G05", file=sys.stderr)
        return 2
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    base: dict[str, dict[str, float]] = {}
    rows = []
    print("| card | variant | seed | informative / candidates | reward, first -> last quarter | groups with no signal "
          "| target pp vs base | IFEval prompt pp vs base | rows + train s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, card in cards:
        path = args.out / "base" / f"{card.family}.{args.split}.json"
        base[name] = _kept(path, lambda: ports.evaluate(world.base_dir, card.family, args.split, str(path.with_suffix(""))))
        for seed in args.seeds:
            for variant in args.variants if card.method == "grpo" else VARIANTS[:1]:
                run = args.out / name / f"{variant}-s{seed}"
                r = _kept(run.with_name(f"{run.name}.{args.split}.json"),
                          lambda: _run(ports, card, variant, seed, run, args.split) | {"card": name})
                rows.append(r)
                print(_row(name, variant, seed, r, base[name]), flush=True)
    print()
    print("| card | variant | seeds | target change, mean pp | between-seed SD pp |")
    print("|---|---|---|---|---|")
    for s in summary(rows, base):
        sd = "n/a" if s["sd"] is None else f"{s['sd']:.2f}"
        print(f"| {s['card']} | {s['variant']} | {s['seeds']} | {s['mean']:+.2f} | {sd} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
