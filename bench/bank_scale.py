"""How the bank's costs grow with its size.

Builds banks of 1e3, 1e4 and 1e5 historical records in a temporary directory (N/10 cards, each
observed in 10 source contexts), then prints the p50/p99 latency of looking up the records of
one card in one source context (indexed query + strict parse) and the time to verify the whole
bank (every record hash). Run: `.venv/bin/python bench/bank_scale.py [--sizes 1000 10000]`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from experience_bank.bank import Bank
from experience_bank.hashing import content_hash
from experience_bank.records import (
    Adapter, Applicability, CandidateCard, DataMix, DataRecipe, DatasetRef, HistoricalRecord, HyperParams,
    ModelRef, NominalBudget, Provenance, SourceContext, SourceEvidence,
)

CONTEXTS = 10


def _h(seed: object) -> str:
    return content_hash(repr(seed))


def template() -> HistoricalRecord:
    data = DatasetRef(id="sql/source/train", sha256=_h("data"))
    card = CandidateCard(
        id="C0", title="bench card", method="sft", family="sql",
        data=DataRecipe(mix=(DataMix(dataset=data, weight=1.0),), n_examples=256),
        hparams=HyperParams(learning_rate=1e-4, batch_size=8),
        adapter=Adapter(kind="lora", rank=8, alpha=16, targets=("q_proj", "v_proj")),
        budget=NominalBudget(steps=100, device_hours=1.0), nu="restart")
    source = SourceContext(
        parent=ModelRef(id="world/base", sha256=_h("m"), arch="qwen3", chat_template_sha256=_h("t")),
        stage=0, family="sql", task="sql/source", datasets={data.id: data.sha256}, runtime="trl-sft",
        eval_protocol="world-eval-v1", output_protocol="sql")
    evidence = SourceEvidence(target_metric="sql/source.exec_acc", delta_src=4.0, delta_point=4.0, kappa=10.0,
                              grade="B", chi=0, replicates=1)
    return HistoricalRecord(
        card=card, source=source, evidence=evidence,
        applicability=Applicability(family="sql", datasets=(data,), runtime="trl-sft", parent_arch="qwen3",
                                    output_protocol="sql"),
        provenance=Provenance(model_sha256=_h("m"), data_sha256={data.id: data.sha256}, config_sha256=_h("c"),
                              eval_sha256=_h("e")))


def records(n: int) -> list[HistoricalRecord]:
    """n distinct records; model_copy skips re-validation of a template that is already valid."""
    base = template()
    out = []
    for i in range(n):
        card = base.card.model_copy(update={"id": f"C{i // CONTEXTS}"})
        source = base.source.model_copy(update={"stage": i % CONTEXTS})
        out.append(base.model_copy(update={"card": card, "source": source}))
    return out


def bench(n: int, directory: Path, lookups: int = 1000) -> dict[str, float]:
    batch = records(n)
    with Bank.init(directory / f"bank-{n}.sqlite") as bank:
        t0 = time.perf_counter()
        bank.import_records(batch, library_note="bench")
        build_s = time.perf_counter() - t0
        rng = random.Random(0)
        latencies = []
        for _ in range(lookups):
            r = batch[rng.randrange(n)]
            t = time.perf_counter()
            found = bank.records_for(r.card.id, content_hash(r.source))
            latencies.append((time.perf_counter() - t) * 1000)
            assert found and found[0][1].card.id == r.card.id
        t = time.perf_counter()
        problems = bank.verify()
        verify_s = time.perf_counter() - t
        assert problems == []
    latencies.sort()
    return {"n": n, "import_s": build_s, "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[int(0.99 * (len(latencies) - 1))], "verify_s": verify_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    args = parser.parse_args()
    print(f"{'records':>8} {'import s':>9} {'lookup p50 ms':>14} {'lookup p99 ms':>14} {'verify s':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            row = bench(n, Path(tmp))
            print(f"{row['n']:>8} {row['import_s']:>9.2f} {row['p50_ms']:>14.3f} {row['p99_ms']:>14.3f} "
                  f"{row['verify_s']:>9.3f}", flush=True)


if __name__ == "__main__":
    main()
