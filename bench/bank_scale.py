"""How the bank's whole workload grows with its size, with the growth ratio between sizes.

For each size N (default 1e3, 1e4, 1e5, 1e6) it builds a bank in a temporary directory and
times, in one run:
- import: N historical records in one transaction, as library version 0 (records/s);
  N/10 cards, each observed in 10 source contexts; 5% of the records are a second replicate
  of another record's card and context (agreeing, mergeable), 1% contradict one (conflicts);
- lookup: p50/p99 of looking up one card in one context (indexed query + strict parse);
- verify: the whole bank after import (SQLite's integrity check, every hash and chain), and
  the integrity check's own share, timed alone (it runs beside the rest on a second
  connection); with --verify-parts, every check alone, on the bank after consolidation;
- consolidate: `Bank.consolidate` of an episode on L(0) that staged N/100 observations (half
  exact duplicates of library records, a quarter new agreeing replicates, a quarter
  contradicting ones); it merges L(0)'s replicates and flags every conflict;
- authorize: 100 candidate cards against the current library, each of its entries compiled
  and decided by policies' real `decide` (BCIT), the episode state carried along;
- export: every record of the current version as stored canonical JSON, to a file.
Run: `.venv/bin/python bench/bank_scale.py [--sizes 1000 10000]`.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Iterator

from experience_bank import integrity
from experience_bank.bank import Bank
from experience_bank.hashing import content_hash
from experience_bank.cards import Adapter, CandidateCard, DataMix, DataRecipe, DatasetRef, HyperParams, NominalBudget
from experience_bank.records import Applicability, CurrentContext, HistoricalRecord, ModelRef, Provenance, SourceContext, SourceEvidence
from policies import EpisodeState, PolicyConfig, decide, next_state

CONTEXTS = 10
REPLICATES = 0.05
CONFLICTS = 0.01
STAGED = 0.01
CANDIDATES = 100


def _h(seed: object) -> str:
    return content_hash(repr(seed))


DATA = DatasetRef(id="sql/source/train", sha256=_h("data"))
PARENT = ModelRef(id="world/base", sha256=_h("m"), arch="qwen3", chat_template_sha256=_h("t"))


def template() -> HistoricalRecord:
    card = CandidateCard(
        id="C0", title="bench card", method="sft", family="sql",
        data=DataRecipe(mix=(DataMix(dataset=DATA, weight=1.0),), n_examples=256),
        hparams=HyperParams(learning_rate=1e-4, batch_size=8),
        adapter=Adapter(kind="lora", rank=8, alpha=16, targets=("q_proj", "v_proj")),
        budget=NominalBudget(steps=100, device_hours=1.0), nu="restart")
    source = SourceContext(
        parent=PARENT, stage=0, family="sql", task="sql/source", datasets={DATA.id: DATA.sha256},
        runtime="trl-sft", eval_protocol="world-eval-v1", output_protocol="sql")
    evidence = SourceEvidence(target_metric="sql/source.exec_acc", delta_src=4.0, delta_point=4.0, kappa=10.0,
                              grade="B", chi=0, replicates=1)
    return HistoricalRecord(
        card=card, source=source, evidence=evidence,
        applicability=Applicability(family="sql", datasets=(DATA,), runtime="trl-sft", parent_arch="qwen3",
                                    output_protocol="sql"),
        provenance=Provenance(model_sha256=_h("m"), data_sha256={DATA.id: DATA.sha256}, config_sha256=_h("c"),
                              eval_sha256=_h("e")))


def observation(base: HistoricalRecord, key: int, seed: int, delta: float) -> HistoricalRecord:
    """One observation of card key // 10 in context key % 10; model_copy skips re-validation."""
    card = base.card.model_copy(update={"id": f"C{key // CONTEXTS}"})
    source = base.source.model_copy(update={"stage": key % CONTEXTS})
    evidence = base.evidence.model_copy(update={"delta_src": delta, "delta_point": delta})
    provenance = base.provenance.model_copy(update={"eval_sha256": _h(("eval", seed))})
    return base.model_copy(update={"card": card, "source": source, "evidence": evidence, "provenance": provenance})


def library(n: int) -> Iterator[HistoricalRecord]:
    """n records: distinct keys first, then agreeing replicates, then contradicting ones."""
    base = template()
    unique = int(n * (1 - REPLICATES - CONFLICTS))
    for i in range(n):
        if i < unique:
            yield observation(base, i, i, 4.0 + (i % 7) * 0.5)
        elif i < unique + int(n * REPLICATES):
            yield observation(base, i - unique, i, 4.5)
        else:
            yield observation(base, (i - unique) % unique, i, -4.0)


def staged(n: int) -> list[HistoricalRecord]:
    """Half exact duplicates of library records, a quarter agreeing replicates, a quarter contradicting."""
    base, m = template(), max(4, int(n * STAGED))
    return ([observation(base, i, i, 4.0 + (i % 7) * 0.5) for i in range(m // 2)] +
            [observation(base, i, n + i, 5.0) for i in range(m // 2, 3 * m // 4)] +
            [observation(base, i, n + i, -6.0) for i in range(3 * m // 4, m)])


def context() -> CurrentContext:
    return CurrentContext(parent=PARENT, stage=1, families=("sql",), tasks={"sql": "sql/target"},
                          datasets={DATA.id: DATA.sha256}, runtimes=("trl-sft", "trl-grpo"),
                          eval_protocol="world-eval-v1", output_protocols={"sql": "sql"})


def _timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def lookups(bank: Bank, n: int, count: int = 1000) -> list[float]:
    rng, base, out = random.Random(0), template(), []
    for _ in range(count):
        r = observation(base, rng.randrange(int(n * (1 - REPLICATES - CONFLICTS))), 0, 4.0)
        source = content_hash(r.source)
        t = time.perf_counter()
        found = bank.records_for(r.card.id, source)
        out.append((time.perf_counter() - t) * 1000)
        assert found and found[0][1].card.id == r.card.id
    return sorted(out)


def authorize(bank: Bank, n: int) -> int:
    """Decide every library entry of 100 candidate cards; return the number of decisions."""
    ctx, config, state, rng, decided = context(), PolicyConfig(), EpisodeState(), random.Random(1), 0
    for _ in range(CANDIDATES):
        for e in bank.library_entries_for(f"C{rng.randrange(max(1, n // CONTEXTS))}"):
            state = next_state(state, decide(e.record, ctx, "bcit", state, config, conflicted=e.conflicted))
            decided += 1
    return decided


def episode(bank: Bank, n: int) -> None:
    bank.start_episode("bench", _h("manifest"), bank.current_library_version())
    for r in staged(n):
        bank.stage_observation("bench", r)
    bank.finish_episode("bench")


def export(bank: Bank, out: Path) -> int:
    with open(out, "w", encoding="utf-8") as f:
        return sum(f.write(line + "\n") > 0 for line in bank.export_lines())


def verify_parts(bank: Bank) -> str:
    """Each of verify's checks alone, in seconds: what the two connections share out."""
    out = []
    for check in (integrity._sqlite, integrity._records, integrity._references, integrity._library,
                  integrity._journals, integrity._schema):
        seconds, _ = _timed(lambda: check(bank.db, integrity._At()))
        out.append(f"{check.__name__.lstrip('_')} {seconds:.2f} s")
    return ", ".join(out)


def bench(n: int, directory: Path, parts: bool = False) -> dict[str, float]:
    batch = list(library(n))  # built before the clock starts: the import is timed, not the generator
    with Bank.init(directory / f"bank-{n}.sqlite") as bank:
        import_s, _ = _timed(lambda: bank.import_records(batch, library_note="bench L(0)"))  # noqa: F821 (runs before the del)
        del batch
        gc.freeze()  # the bench's own setup objects out of the collector's way: lookups time the bank
        latencies = lookups(bank, n)
        verify_s, problems = _timed(bank.verify)
        assert problems == [], problems[:3]
        integrity_s, _ = _timed(lambda: bank.db.execute("PRAGMA integrity_check").fetchall())
        episode(bank, n)
        consolidate_s, _ = _timed(lambda: bank.consolidate("bench"))
        authorize_s, decided = _timed(lambda: authorize(bank, n))
        export_s, exported = _timed(lambda: export(bank, directory / f"export-{n}.jsonl"))
        conflicted = sum(1 for _ in bank.db.execute(
            "SELECT 1 FROM library_entries WHERE version = ? AND conflicted = 1", [bank.current_library_version()]))
        checks = verify_parts(bank) if parts else ""
    gc.unfreeze()
    return {"n": n, "import_s": import_s, "rec_per_s": n / import_s, "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[int(0.99 * (len(latencies) - 1))], "verify_s": verify_s, "integrity_s": integrity_s,
            "consolidate_s": consolidate_s, "authorize_s": authorize_s, "decisions": decided,
            "export_s": export_s, "exported": exported, "conflicted": conflicted, "checks": checks}


COLUMNS = (("import_s", "import s", ".2f"), ("rec_per_s", "rec/s", ".0f"), ("p50_ms", "lookup p50 ms", ".3f"),
           ("p99_ms", "lookup p99 ms", ".3f"), ("verify_s", "verify s", ".2f"), ("integrity_s", "of it: sqlite", ".2f"),
           ("consolidate_s", "consol. s", ".2f"),
           ("authorize_s", "auth100 s", ".3f"), ("export_s", "export s", ".2f"))


def _line(label: str, values: list[str]) -> str:
    return f"{label:>10} " + " ".join(f"{v:>13}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--verify-parts", action="store_true", help="also time each of verify's checks alone")
    args = parser.parse_args()
    print(_line("records", [title for _, title, _ in COLUMNS]), flush=True)
    previous = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            row = bench(n, Path(tmp), args.verify_parts)
            print(_line(str(n), [format(row[k], f) for k, _, f in COLUMNS]) +
                  f"   ({row['decisions']} decisions, {row['exported']} exported, {row['conflicted']} conflicted)",
                  flush=True)
            if row["checks"]:
                print(f"{'':>10} verify's checks alone, after consolidation: {row['checks']}", flush=True)
            if previous is not None:
                ratios = [format(row[k] / previous[k], ".1f") + "x" for k, _, _ in COLUMNS]
                print(_line(f"growth {row['n'] // previous['n']}x", ratios), flush=True)
            previous = row


if __name__ == "__main__":
    main()
