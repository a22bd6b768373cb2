"""evaluate(): generate once, store raw generations, score with the pure scorer; rescore() offline.

Layout under out_dir, per suite (`sql/target` -> `sql_target`):
    <name>.<split>.items.jsonl        the items scored (so rescoring needs no generator)
    <name>.<split>.generations.jsonl  raw generations (its sha256 is in the result)
    <name>.<split>.identity.json      EvalIdentity
    <name>.<split>.result.json        SuiteResult
    results_<date>.json, samples_<name>_<date>.jsonl   the same, in lm-eval's shape (evaluators/lmeval.py)
`seed` fixes the world's items and the generation seed alike.

With a run cache (experience_bank.runcache), an evaluation whose key (`evaluation_key`: each
suite's EvalIdentity, i.e. weights, chat template, items, scorer, backend, batch, tokens and
seed, plus the evaluator's code and library versions) is stored is served from it, files and
results alike; a served model (an endpoint by name) is never cached.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.hashing import canonical_json, sha256_text
from experience_bank.results import EvalIdentity, SuiteResult
from evaluators import lmeval, models, served, tasks
from evaluators.generate import generate
from evaluators.scoring.suites import data_sha256, generations_jsonl, parse_generations, score, scorer_version

# per family: enough tokens for the longest gold answer plus slack
MAX_NEW_TOKENS = {"finance": 48, "sql": 64, "function": 72, "ifeval": 112, "captrack": 48}


def _stem(out_dir: Path, suite: str, split: str) -> Path:
    return out_dir / f"{suite.replace('/', '_')}.{split}"


def _write(stem: Path, items: list[dict], gens: list[str], identity: EvalIdentity, result: SuiteResult) -> None:
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.items.jsonl").write_text("".join(canonical_json(x) + "\n" for x in items))
    Path(f"{stem}.generations.jsonl").write_text(generations_jsonl(items, gens))
    Path(f"{stem}.identity.json").write_text(identity.model_dump_json(indent=1))
    Path(f"{stem}.result.json").write_text(result.model_dump_json())


def _identity(suite, split, items, model_sha, template_sha, backend, batch_size, max_new, seed) -> EvalIdentity:
    return EvalIdentity(suite=suite, split=split, data_sha256=data_sha256(items), scorer_version=scorer_version(suite),
                        model_sha256=model_sha, chat_template_sha256=template_sha, backend=backend,
                        batch_size=batch_size, max_new_tokens=max_new, seed=seed)


_CODE_FILES = ("evaluators", "experience_bank/results.py")
"""What the evaluator version hashes: this package (tasks, generation, scorers) and its records."""


def evaluation_key(model_dir, suites, split: str, *, backend: str, batch_size: int, n: int | None, seed: int,
                   items: dict[str, list[dict]] | None) -> dict | None:
    """The run cache's key of one evaluate() call, or None when it must not be cached."""
    if backend not in ("transformers", "vllm"):
        return None  # a served model can change behind its name
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    from experience_bank.runcache import source_version  # noqa: PLC0415

    model_sha, template_sha = models.identity(model_dir)
    idents = []
    for suite in suites:
        its = (items or {}).get(suite) or tasks.items(suite, split, seed, n)
        idents.append(_identity(suite, split, its, model_sha, template_sha, backend, batch_size,
                                MAX_NEW_TOKENS[suite.split("/")[0]], seed).model_dump(mode="json"))
    return {"kind": "eval", "suites": idents, "code": source_version(_CODE_FILES),
            "libraries": {"torch": torch.__version__, "transformers": transformers.__version__}}


def _dump(results: dict[str, SuiteResult]) -> str:
    return canonical_json({k: v.model_dump(mode="json") for k, v in results.items()})


def _load(text: str, dest: Path) -> dict[str, SuiteResult]:
    """A stored evaluation, re-derived from the files served into `dest`: each suite rescored
    from its items and generations must give the stored result (sealing.Mismatch otherwise)."""
    from experience_bank.sealing import Mismatch  # noqa: PLC0415

    stored = {k: SuiteResult.model_validate_json(json.dumps(v)) for k, v in json.loads(text).items()}
    for suite, result in stored.items():
        if suite != result.identity.suite or _rescore(_stem(Path(dest), suite, result.identity.split)) != result:
            raise Mismatch(f"its stored {suite} result is not what its generations score")
    return stored


def evaluate(model_dir, suites: list[str] | tuple[str, ...], split: str, *, out_dir, backend: str = "transformers",
             batch_size: int = 16, n: int | None = None, seed: int = 0,
             items: dict[str, list[dict]] | None = None, cache=None,
             adapter_dir: str | None = None) -> dict[str, SuiteResult]:
    """Scores of one model on each suite's split; `items` overrides the generated items (real data);
    `cache` (experience_bank.runcache.RunCache) serves an evaluation of the same content;
    `adapter_dir`: the LoRA adapter `model_dir` kept, which backend openai loads into the server."""
    key = None if cache is None else evaluation_key(model_dir, suites, split, backend=backend, batch_size=batch_size,
                                                    n=n, seed=seed, items=items)
    if key is not None:
        return cache.run(key, out_dir, lambda: evaluate(model_dir, suites, split, out_dir=out_dir, backend=backend,
                                                        batch_size=batch_size, n=n, seed=seed, items=items,
                                                        adapter_dir=adapter_dir),
                         dump=_dump, load=_load)
    out_dir = Path(out_dir)
    started, clock = time.time(), time.monotonic()
    results, scored_items, generations = {}, {}, {}
    with _model(model_dir, backend, adapter_dir) as (model, model_sha, template_sha):
        for suite in suites:
            its = (items or {}).get(suite) or tasks.items(suite, split, seed, n)
            max_new = MAX_NEW_TOKENS[suite.split("/")[0]]
            gens = generate(model, [x["messages"] for x in its], backend=backend, batch_size=batch_size,
                            max_new_tokens=max_new, seed=seed)
            ident = _identity(suite, split, its, model_sha, template_sha, backend, batch_size, max_new, seed)
            results[suite] = score(suite, its, gens, identity=ident)
            _write(_stem(out_dir, suite, split), its, gens, ident, results[suite])
            scored_items[suite], generations[suite] = its, gens
    lmeval.write(out_dir, str(model_dir), results, scored_items, generations, started=started,
                 wall_seconds=time.monotonic() - clock)
    return results


@contextmanager
def _model(model_dir, backend: str, adapter_dir: str | None = None):
    """What generate() receives, the weights hash and the chat-template hash, for the evaluation."""
    if backend == "transformers":
        net, tok = models.load(model_dir)
        yield (net, tok), models.weights_sha256(model_dir), models.chat_template_sha256(tok)
    elif backend == "vllm":
        from transformers import AutoTokenizer  # template hash only; vLLM loads the weights itself
        tok = AutoTokenizer.from_pretrained(models.check_dir(model_dir), local_files_only=True)
        yield str(model_dir), models.weights_sha256(model_dir), models.chat_template_sha256(tok)
    else:  # served: the server applies its own template; a child's adapter is loaded for the block
        with served.serve(str(model_dir), adapter_dir) as model:
            yield model.name, model.model_sha256, sha256_text(f"served:{model.name}")


def rescore(out_dir) -> dict[str, SuiteResult]:
    """Recompute every stored suite result from its stored items and generations (no model)."""
    out_dir = Path(out_dir)
    idents = sorted(out_dir.glob("*.identity.json"))
    if not idents:
        raise BadInput(f"no *.identity.json in {out_dir}: expected the folder evaluate() wrote")
    results = {}
    for path in idents:
        result = _rescore(Path(str(path).removesuffix(".identity.json")))
        results[result.identity.suite] = result
    return results


def _rescore(stem: Path) -> SuiteResult:
    """One suite's result recomputed from its stored items and generations (BadInput when the
    generations are not the ones its stored result was scored on)."""
    identity = EvalIdentity.model_validate_json(Path(f"{stem}.identity.json").read_text())
    its = [json.loads(line) for line in Path(f"{stem}.items.jsonl").read_text().splitlines()]
    text = Path(f"{stem}.generations.jsonl").read_text()
    ids, gens = parse_generations(text)
    stored = SuiteResult.model_validate_json(Path(f"{stem}.result.json").read_text())
    if ids != [x["id"] for x in its] or sha256_text(text) != stored.generations_sha256:
        raise BadInput(f"{stem}.generations.jsonl does not match its stored result: the run folder was altered")
    return score(identity.suite, its, gens, identity=identity)
