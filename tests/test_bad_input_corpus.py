"""A corpus of malformed inputs for every command that reads a user's file, generated from families
of malformation: each case must end with exit code 2, exactly one `agent: error:` line on stderr,
no traceback, and nothing written (every byte under the test's root, the cache dir and the temp
dir included, is compared before and after).

Families: text encodings (Latin-1, Windows-1252, UTF-16 with a BOM, overlong and surrogate
sequences, truncated sequences), JSON syntax and bounds (empty, truncated, NaN, 1e999, duplicate
keys, 5,000-digit and 10**400 integers, 5,000 and 100,000 levels of nesting, unpaired surrogate
escapes, the wrong top-level type), record-specific field mutations (feature rows, contexts,
records, cards), YAML configs (non-string keys, deep nesting, huge integers, wrong types), bank
files that are not banks, model folders transformers cannot load, and output paths that are files.
Every command runs in-process through `agent.cli.main.main`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support import bank_factory as bf
from agent.cli.main import main
from experience_bank.bank import Bank
from experience_bank.records import CurrentContext, ModelRef


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    """`{case}` is the case's own folder, `{ok}` the folder of valid inputs."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Files (relative to the case folder) written before the command runs."""
    dirs: tuple[str, ...] = ()
    """Folders (relative to the case folder) made before the command runs."""
    needle: str = ""
    """A word the error line must hold."""


# --- families of malformation -------------------------------------------------------------

BAD_BYTES = {
    "latin1": b"caf\xe9", "cp1252-quotes": b"\x93quoted\x94", "overlong-slash": b"\xc0\xaf",
    "surrogate-bytes": b"\xed\xa0\x80", "truncated-euro": b"\xe2\x82", "lone-continuation": b"\x80",
    "byte-ff": b"\xff", "nul-and-ff": b"\x00\xff",
}


def encodings(text: str) -> dict[str, bytes]:
    """The text with bytes that are not UTF-8 inside its first string, or wholly re-encoded."""
    cut = text.index('"') + 1 if '"' in text else len(text) // 2
    raw = text.encode("utf-8")
    out = {f"enc-{k}": raw[:cut] + bad + raw[cut:] for k, bad in BAD_BYTES.items()}
    out |= {"enc-utf16-bom": text.encode("utf-16"), "enc-utf16be-bom": b"\xfe\xff" + text.encode("utf-16-be"),
            "enc-cp1252-whole": (text.replace('"', "\u201c", 1) if '"' in text else text + "# \u201cnote\u201d\n"
                                 ).encode("cp1252")}
    return out


def _with(text: str, key: str, raw: str) -> str:
    """A JSON object's text with `key` set to the raw JSON `raw` (added, or replacing its value)."""
    obj = json.loads(text)
    obj[key] = "@@"
    return json.dumps(obj).replace('"@@"', raw)


def json_doc(text: str, key: str) -> dict[str, bytes]:
    """A valid JSON object's text broken every way the parser or its bounds must refuse; `key`
    is the field whose value receives the out-of-bounds numbers."""
    out = {
        "empty": "", "blank": "  \n \n", "truncated": text[: len(text) // 2], "trailing-comma": text[:-1] + ",}",
        "single-quotes": text.replace('"', "'"), "comment": "// note\n" + text, "html": "<html><body>502</body></html>",
        "nan": _with(text, key, "NaN"), "infinity": _with(text, key, "Infinity"), "minus-inf": _with(text, key, "-Infinity"),
        "1e999": _with(text, key, "1e999"), "-1e999": _with(text, key, "-1e999"),
        "int-5000-digits": _with(text, key, "9" * 5000), "int-10e400": _with(text, key, "1" + "0" * 400),
        "int-2e64": _with(text, key, str(2**64)),
        "deep-5000": _with(text, key, "[" * 5000 + "]" * 5000), "deep-100000": _with(text, key, "[" * 100_000),
        "surrogate-escape": _with(text, key, '"\\ud800"'),
        "dup-key": text[:-1] + ", " + text[1:],
        "top-number": "5", "top-null": "null", "top-list": "[]", "top-string": '"row"', "top-true": "true",
        "two-values": text + " " + text,
    }
    encoded = {k: v.encode("utf-8") for k, v in out.items()}
    return encoded | {"utf8-bom": b"\xef\xbb\xbf" + text.encode("utf-8")} | encodings(text)


def jsonl_doc(good_line: str, key: str) -> dict[str, bytes]:
    """A valid first line, then each malformed document as line 2 (the error must name the file)."""
    out = {}
    for name, bad in json_doc(good_line, key).items():
        if name in ("empty", "blank"):
            out[name] = bad  # the whole file
        elif name.startswith("enc-utf16") or name == "enc-cp1252-whole":
            out[name] = bad
        else:
            out[name] = good_line.encode() + b"\n" + bad.replace(b"\n", b" ") + b"\n"
    return out


def mutated(text: str, changes: dict[str, object]) -> dict[str, bytes]:
    """One file per change: a top-level field set to a wrong value, or removed (value ...)."""
    out = {}
    for name, (key, value) in changes.items():
        obj = json.loads(text)
        if value is ...:
            obj.pop(key)
        else:
            obj[key] = value
        out[name] = json.dumps(obj).encode()
    return out


FEATURE_ROW = dict(grade="A", delta_src=2.0, kappa=2.0, family=1, data=1, runtime=1, parent=1, protocol=0.5, H=0,
                   nu="continue", chi=1, is_new=False)
FEATURE_MUTATIONS = {
    "grade-D": ("grade", "D"), "grade-number": ("grade", 1), "grade-lower": ("grade", "a"),
    "null-delta": ("delta_src", None), "null-kappa": ("kappa", None), "kappa-zero": ("kappa", 0),
    "string-delta": ("delta_src", "2.0"), "bool-delta": ("delta_src", True), "string-nu": ("nu", "maybe"),
    "number-nu": ("nu", 5), "numeric-chi": ("chi", 0.5), "string-chi": ("chi", "1"), "chi-without-A": ("chi", 0),
    "string-conflicts": ("conflicts", "stage"), "number-conflicts": ("conflicts", 3),
    "dict-conflicts": ("conflicts", {"a": 1}), "list-of-numbers-conflicts": ("conflicts", [1, 2]),
    "H-true": ("H", True), "H-two": ("H", 2), "H-string": ("H", "0"), "is_new-0": ("is_new", 0),
    "is_new-string": ("is_new", "false"), "is_new-true-with-evidence": ("is_new", True),
    "conflicted-yes": ("conflicted", "yes"), "conflicted-1": ("conflicted", 1), "field-0.7": ("family", 0.7),
    "field-string": ("data", "1"), "field-null": ("runtime", None), "field-2": ("parent", 2),
    "bad-id": ("id", "not an id!"), "unknown-key": ("weight", 1.0), "missing-grade": ("grade", ...),
    "missing-H": ("H", ...), "delta-1e6": ("delta_src", 1e6),
}


def _context() -> str:
    ctx = CurrentContext(parent=ModelRef(id="world/base", sha256=bf.sha("model"), arch="qwen3",
                                         chat_template_sha256=bf.sha("tpl")),
                         stage=0, families=("sql",), tasks={"sql": "sql/target"},
                         datasets={"sql/source/train": bf.sha("data")}, runtimes=("trl-sft",),
                         eval_protocol="world-eval-v1", output_protocols={"sql": "sql"})
    return ctx.model_dump_json()


CONTEXT_MUTATIONS = {
    "stage-negative": ("stage", -1), "stage-string": ("stage", "0"), "stage-bool": ("stage", True),
    "stage-float": ("stage", 1.5), "families-chess": ("families", ["chess"]), "runtimes-string": ("runtimes", "trl"),
    "datasets-list": ("datasets", ["a"]), "parent-missing": ("parent", ...), "parent-null": ("parent", None),
    "tasks-bad-id": ("tasks", {"sql": "not an id!"}),
}

CARD_MUTATIONS = {
    "method-dpo": ("method", "dpo"), "family-chess": ("family", "chess"), "nu-x": ("nu", "x"),
    "id-empty": ("id", ""), "title-long": ("title", "x" * 500), "data-null": ("data", None),
    "budget-zero": ("budget", {"steps": 0, "device_hours": 1.0}), "hparams-lr-1": ("hparams", {"learning_rate": 1.0,
                                                                                                "batch_size": 8}),
    "adapter-lora-no-rank": ("adapter", {"kind": "lora"}), "unknown-key": ("trust_remote_code", True),
    "missing-card-id": ("id", ...),
}

RECORD_MUTATIONS = {
    "kind-other": ("kind", "other"), "card-missing": ("card", ...), "evidence-string": ("evidence", "good"),
    "applicability-null": ("applicability", None), "unknown-key": ("outcome", "great"),
    "provenance-list": ("provenance", []),
}

YAML_CASES = {
    "key-int": "1: 2\n", "key-null": "null: 1\n", "key-true": "true: x\n", "key-float": "1.5: x\n",
    "key-list": "[a, b]: 1\n", "key-map": "{a: 1}: 2\n", "key-complex": "? [a]\n: 1\n", "key-date": "2001-01-01: x\n",
    "nested-key-int": "seed: {1: 2}\n",
    "deep-5000": "seed: " + "[" * 5000 + "]" * 5000 + "\n", "deep-100000": "seed: " + "[" * 100_000 + "\n",
    "int-5000-digits": "seed: " + "9" * 5000 + "\n", "int-10e400": "seed: 1" + "0" * 400 + "\n",
    "seed-negative": "seed: -1\n", "seed-string": "seed: '3'\n", "seed-float": "seed: 1.5\n", "seed-inf": "seed: .inf\n",
    "tau-nan": "tau_l: .nan\n", "trial-half": "trial_fraction: 0.5\n", "policy-list": "policy: [a]\n",
    "budget-map": "episode_budget: {}\n", "quiet-string": "quiet: maybe\n", "world-huge": "world: huge\n",
    "top-list": "- 1\n", "top-string": "just words\n", "unclosed": "seed: [1\n", "duplicate": "seed: 1\nseed: 2\n",
    "unknown": "sede: 3\n", "tab": "\tseed: 1\n", "python-tag": "seed: !!python/object/apply:os.system [ls]\n",
    "self-alias": "seed: &a [*a]\n",
}

MODEL_FOLDERS = ("no-config", "config-latin1", "config-not-json", "config-list", "config-no-model-type",
                 "config-unknown-arch", "weights-garbage", "weights-empty", "weights-truncated", "no-weights",
                 "weights-huge-header", "config-shape-mismatch", "config-not-causal-lm",
                 "no-tokenizer", "no-chat-template", "tokenizer-garbage")

BANK_FILES = {"zero-bytes": b"", "text": b"hello, I am not a bank\n", "random": bytes(range(256)) * 16,
              "header-then-garbage": b"SQLite format 3\x00" + bytes(range(256)) * 16}


# --- the valid inputs and the cases ----------------------------------------------------------


@pytest.fixture(scope="module")
def ok(tmp_path_factory) -> Path:
    from test_generate import build_tiny_model

    root = tmp_path_factory.mktemp("ok")
    with Bank.init(root / "bank.sqlite") as bank:
        bank.import_records([bf.record("S01")], library_note="corpus")
    (root / "context.json").write_text(_context())
    (root / "card.json").write_text(bf.card("S01").model_dump_json())
    (root / "records.jsonl").write_text(bf.record("S03").model_dump_json() + "\n")
    build_tiny_model(root / "parent")
    data = (root / "bank.sqlite").read_bytes()
    (root / "truncated.sqlite").write_bytes(data[: len(data) // 2])
    return root


def _model_folder(case: Path, kind: str, ok: Path) -> None:
    folder = case / "model"
    shutil.copytree(ok / "parent", folder)
    weights = next(folder.glob("*.safetensors"))
    config = folder / "config.json"
    if kind == "no-config":
        config.unlink()
    elif kind == "config-latin1":
        config.write_bytes(config.read_bytes().replace(b'"', b'"\xe9', 1))
    elif kind == "config-not-json":
        config.write_text("{model_type: qwen3")
    elif kind == "config-list":
        config.write_text("[]")
    elif kind == "config-no-model-type":
        config.write_text(json.dumps({k: v for k, v in json.loads(config.read_text()).items() if k != "model_type"}))
    elif kind == "config-unknown-arch":
        config.write_text(json.dumps(json.loads(config.read_text()) | {"model_type": "no-such-arch"}))
    elif kind == "weights-garbage":
        weights.write_bytes(b"not safetensors at all" * 10)
    elif kind == "weights-empty":
        weights.write_bytes(b"")
    elif kind == "weights-truncated":
        weights.write_bytes(weights.read_bytes()[:200])
    elif kind == "no-weights":
        weights.unlink()
    elif kind == "no-tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            (folder / name).unlink()
    elif kind == "no-chat-template":
        (folder / "chat_template.jinja").unlink()
    elif kind == "tokenizer-garbage":
        (folder / "tokenizer.json").write_text("{not json")
    elif kind == "config-shape-mismatch":
        config.write_text(json.dumps(json.loads(config.read_text()) | {"intermediate_size": 96}))
    elif kind == "config-not-causal-lm":
        config.write_text(json.dumps({"model_type": "vit", "image_size": 32, "patch_size": 8}))
    elif kind == "weights-huge-header":
        weights.write_bytes((10**12).to_bytes(8, "little") + b"{}")


def _file_cases(kind: str, docs: dict[str, bytes], argv: tuple[str, ...], name: str) -> list[Case]:
    return [Case(f"{kind}-{k}", argv, {name: v}) for k, v in docs.items()]


def cases() -> list[Case]:
    row = json.dumps(FEATURE_ROW)
    out = _file_cases("features", jsonl_doc(row, "delta_src") | mutated(row, FEATURE_MUTATIONS),
                      ("authorize", "--features", "{case}/f.jsonl", "--json"), "f.jsonl")
    ctx = _context()
    out += _file_cases("context", json_doc(ctx, "stage") | mutated(ctx, CONTEXT_MUTATIONS),
                       ("authorize", "--bank", "{ok}/bank.sqlite", "--context", "{case}/ctx.json"), "ctx.json")
    record = bf.record("S02").model_dump_json()
    bank_copy = {"bank.sqlite": None}
    out += [Case(c.id, c.argv, c.files | bank_copy) for c in _file_cases(
        "import", jsonl_doc(record, "kind") | mutated(record, RECORD_MUTATIONS),
        ("bank", "import", "{case}/records.jsonl", "--bank", "{case}/bank.sqlite"), "records.jsonl")]
    card = bf.card("S01").model_dump_json()
    out += _file_cases("card", json_doc(card, "nu") | mutated(card, CARD_MUTATIONS),
                       ("train", "--card", "{case}/card.json", "--parent", "{ok}/parent", "--out", "{case}/out"),
                       "card.json")
    pool = json.dumps({"prompt": "q", "completion": "a"})
    out += _file_cases("train-data", jsonl_doc(pool, "prompt"),
                       ("train", "--card", "{ok}/card.json", "--parent", "{ok}/parent", "--data",
                        "sql/source/train={case}/pool.jsonl", "--out", "{case}/out"), "pool.jsonl")
    ledger_line = json.dumps({"seq": 0, "episode_id": "E1"})
    out += _file_cases("audit", jsonl_doc(ledger_line, "seq"), ("audit", "{case}/run"), "run/decisions.jsonl")
    replay = {k: v for k, v in jsonl_doc(ledger_line, "seq").items() if k.startswith(("enc-", "deep", "int", "top"))}
    out += _file_cases("replay", replay, ("replay", "{case}/run"), "run/decisions.jsonl")
    run = ("run", "--config", "{case}/c.yaml", "--out", "{case}/runs/ep", "--bank", "{case}/b.sqlite")
    yaml_docs = {k: v.encode() for k, v in YAML_CASES.items()} | encodings("seed: 1\npolicy: bcit\n")
    out += [Case(f"config-{k}", run, {"c.yaml": v}, "config") for k, v in yaml_docs.items()]
    out += _file_cases("resume", json_doc(json.dumps({"episode_id": "ep", "config": {"seed": 0}}), "config") |
                       {"no-config": b'{"episode_id": "ep"}'}, ("run", "--resume", "{case}/ep", "--quiet"),
                       "ep/manifest.json")
    parse_level = ("enc-", "empty", "truncated", "html", "comment", "single-quotes", "utf8-bom", "nan", "infinity",
                   "1e999", "int-", "deep-", "surrogate-escape", "dup-key")
    tatqa = {k: v for k, v in json_doc(json.dumps({"table": {"table": [["a"]]}}), "table").items()
             if k.startswith(parse_level)}
    out += _file_cases("eval-tatqa", tatqa, ("eval", "--model", "{ok}/parent", "--suite", "finance/target",
                                             "--data", "{case}/tatqa.json", "--n", "2"), "tatqa.json")
    prompt = json.dumps({"key": 1, "prompt": "Say hi", "instruction_id_list": [], "kwargs": []})
    ifeval = {k: v for k, v in jsonl_doc(prompt, "key").items() if k.startswith(parse_level)}
    out += _file_cases("eval-ifeval", ifeval, ("eval", "--model", "{ok}/parent", "--suite", "ifeval",
                                               "--data", "{case}/input.jsonl", "--n", "2"), "input.jsonl")
    out += _bank_cases() + _model_cases() + _out_cases() + _flag_cases()
    return out


BANK_COMMANDS = {
    "init": ("bank", "init"), "list": ("bank", "list"), "show": ("bank", "show", "S01"),
    "verify": ("bank", "verify"), "consolidate": ("bank", "consolidate", "--episode", "E1"),
    "export": ("bank", "export"), "import": ("bank", "import", "{ok}/records.jsonl"),
    "authorize": ("authorize", "--context", "{ok}/context.json"),
    "run": ("run", "--out", "{case}/runs/ep", "--episode-budget", "1h", "--quiet"),
}


def _bank_cases() -> list[Case]:
    out = []
    for cmd, argv in BANK_COMMANDS.items():
        for kind, data in BANK_FILES.items():
            out.append(Case(f"bank-{cmd}-{kind}", (*argv, "--bank", "{case}/bank.sqlite"), {"bank.sqlite": data},
                            needle="bank"))
        out.append(Case(f"bank-{cmd}-truncated", (*argv, "--bank", "{ok}/truncated.sqlite"), needle="bank"))
        out.append(Case(f"bank-{cmd}-directory", (*argv, "--bank", "{case}/bank.sqlite"), dirs=("bank.sqlite",),
                        needle="bank"))
    return out


def _model_cases() -> list[Case]:
    out = []
    for kind in MODEL_FOLDERS:
        out.append(Case(f"eval-model-{kind}", ("eval", "--model", "{case}/model", "--suite", "ifeval", "--split",
                                               "validation", "--n", "2"), {"@model": kind.encode()}))
        out.append(Case(f"train-parent-{kind}", ("train", "--card", "{ok}/card.json", "--parent", "{case}/model",
                                                 "--out", "{case}/out"), {"@model": kind.encode()}))
    return out


RETRO = str(Path(__file__).resolve().parents[1] / "docs" / "results" / "retrospective-v7-w0")
"""A committed executed retrospective: what extrapolate and gonogo read before they write."""


def _out_cases() -> list[Case]:
    file = {"taken": b"a file\n"}
    return [
        Case("run-out-is-file", ("run", "--out", "{case}/taken", "--bank", "{case}/b.sqlite", "--quiet"), file, needle="--out"),
        Case("run-out-under-file", ("run", "--out", "{case}/taken/ep", "--bank", "{case}/b.sqlite"), file, needle="--out"),
        Case("eval-out-is-file", ("eval", "--model", "{ok}/parent", "--suite", "ifeval", "--n", "2", "--out",
                                  "{case}/taken"), file, needle="--out"),
        Case("train-out-is-file", ("train", "--card", "{ok}/card.json", "--parent", "{ok}/parent", "--out",
                                   "{case}/taken"), file, needle="--out"),
        Case("export-out-is-dir", ("bank", "export", "--bank", "{ok}/bank.sqlite", "--out", "{case}/d"), dirs=("d",),
             needle="--out"),
        # refused before a world is built or an episode starts (each ran first, then failed on the path)
        Case("compare-out-is-file", ("compare", "--policies", "bcit,no_memory", "--seeds", "2", "--out",
                                     "{case}/taken"), file, needle="--out"),
        Case("compare-results-is-file", ("compare", "--policies", "bcit,no_memory", "--seeds", "2", "--out",
                                         "{case}/cmp", "--results", "{case}/taken"), file, needle="--results"),
        Case("compare-policy-twice", ("compare", "--policies", "bcit,no_memory,bcit", "--seeds", "2", "--out",
                                      "{case}/cmp"), needle="more than once"),
        Case("retrospective-out-under-file", ("retrospective", "--execute", "--size", "test", "--out",
                                              "{case}/taken/r"), file, needle="--out"),
        Case("retrospective-cells-negative", ("retrospective", "--execute", "--size", "test", "--cells", "-2",
                                              "--out", "{case}/r"), needle="--cells"),
        Case("extrapolate-save-under-file", ("extrapolate", "--retrospective", RETRO, "--out", "{case}/x.md",
                                             "--save", "{case}/taken/m.json"), file, needle="--save"),
        Case("gonogo-model-is-dir", ("gonogo", RETRO, "--model", "{case}/d"), dirs=("d",), needle="--model"),
        Case("seed-bank-bank-is-dir", ("world", "seed-bank", "--size", "test", "--bank", "{case}/d"), dirs=("d",),
             needle="not a file"),
        Case("train-fraction-zero", ("train", "--card", "{ok}/card.json", "--parent", "{ok}/parent", "--fraction", "0",
                                     "--out", "{case}/out"), needle="--fraction"),
        Case("eval-n-zero", ("eval", "--model", "{ok}/parent", "--suite", "ifeval", "--n", "0"), needle="--n"),
    ]


def _flag_cases() -> list[Case]:
    """Seeds and thread counts torch, numpy or the world refuse (or would take and mean another run):
    refused before anything is written, not a traceback from deep inside the run."""
    train = ("train", "--card", "{ok}/card.json", "--parent", "{ok}/parent", "--out", "{case}/out")
    evaluate = ("eval", "--model", "{ok}/parent", "--suite", "ifeval", "--n", "2")
    out = []
    for name, seed in (("negative", "-1"), ("2e32", str(2**32)), ("2e64", str(2**64))):
        out.append(Case(f"eval-seed-{name}", (*evaluate, "--seed", seed), needle="--seed"))
        out.append(Case(f"train-seed-{name}", (*train, "--seed", seed), needle="--seed"))
        out.append(Case(f"train-world-seed-{name}", (*train, "--world-seed", seed), needle="--world-seed"))
    for threads in ("0", "-1"):
        out.append(Case(f"train-threads-{threads}", (*train, "--threads", threads), needle="--threads"))
    return out


CASES = cases()


def test_the_corpus_is_large_and_covers_every_command():
    assert len(CASES) >= 300 and len({c.id for c in CASES}) == len(CASES)
    commands = {c.argv[0] if c.argv[0] != "bank" else f"bank {c.argv[1]}" for c in CASES}
    assert {"authorize", "audit", "replay", "run", "eval", "train", "bank import", "bank init", "bank list",
            "bank show", "bank verify", "bank export", "bank consolidate", "compare", "retrospective",
            "world"} <= commands


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def _tripwire(*a, **k):
    raise AssertionError("agent run went past its input checks")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_input_is_one_line_exit_2_and_writes_nothing(case, ok, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr("agent.loop.episode._world_and_bank", _tripwire, raising=False)
    folder = tmp_path / "case"
    folder.mkdir()
    for d in case.dirs:
        (folder / d).mkdir(parents=True)
    for name, data in case.files.items():
        if name == "@model":
            _model_folder(folder, data.decode(), ok)
        elif data is None:
            shutil.copy(ok / name, folder / name)
        else:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
    argv = [a.replace("{case}", str(folder)).replace("{ok}", str(ok)) for a in case.argv]
    before, ok_before = _snapshot(tmp_path), _snapshot(ok)
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, (code, err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("agent: error: "), err[-2000:]
    assert "Traceback" not in err and case.needle in lines[0], lines
    assert _snapshot(tmp_path) == before and _snapshot(ok) == ok_before


LEDGER_SHAPES = {  # JSON objects that are not decision-ledger entries: the audit's answer is no (exit 1)
    "empty-object": {}, "seq-only": {"seq": 0, "episode_id": "E1"}, "inputs-list": {"seq": 0, "inputs": [],
                                                                                    "decision": {}},
    "prev-null": {"seq": 0, "episode_id": "E", "prev_hash": None, "entry_hash": "0" * 64, "decision": {"x": 1},
                  "inputs": {"record": None, "context": None, "features": {}, "config": {}, "state": {}}},
    "decision-string": {"seq": 0, "episode_id": "E", "decision": "train", "inputs": {}},
    "inputs-null": {"seq": 0, "episode_id": "E", "decision": {}, "inputs": None},
    "features-garbage": {"seq": 0, "episode_id": "E", "decision": {}, "inputs": {
        "record": None, "context": None, "features": {"S": "high"}, "config": {}, "state": {}}},
}


@pytest.mark.parametrize("command", ["audit", "replay"])
@pytest.mark.parametrize("shape", list(LEDGER_SHAPES))
def test_a_ledger_line_that_is_no_entry_is_a_named_problem(tmp_path, monkeypatch, capsys, command, shape):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "decisions.jsonl").write_text(json.dumps(LEDGER_SHAPES[shape]) + "\n")
    before = _snapshot(tmp_path)
    assert main([command, "run", "--json"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "not a decision-ledger entry" in captured.out
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("doc", ["truncated", "dup-key", "nan", "deep-5000", "int-10e400"])
def test_a_damaged_manifest_is_named_by_its_path(tmp_path, monkeypatch, capsys, doc):
    """parse_model's JSON errors said only "not valid JSON (...)": the run directory has many files."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ep").mkdir()
    manifest = tmp_path / "ep" / "manifest.json"
    manifest.write_bytes(json_doc(json.dumps({"episode_id": "ep", "config": {"seed": 0}}), "config")[doc])
    before = _snapshot(tmp_path)
    assert main(["run", "--resume", str(tmp_path / "ep"), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"agent: error: invalid {manifest}: "), lines
    assert _snapshot(tmp_path) == before
