"""Checks of user-given files and paths that several commands share, run before anything is written.

Every reader here turns what the operating system, the UTF-8 decoder or the JSON parser would
raise into one BadInput line naming the file, the line where known, and the fix. JSON is
always parsed by `experience_bank.hashing.loads_strict` (duplicate keys, NaN, huge integers,
deep nesting refused).

Out of scope: the bank's own integrity (`agent bank verify`) and a model's numerical health
(trainers' sanity checks); a bank file is checked here only for being an SQLite file at all,
so that opening it cannot turn a stray file into a fresh bank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from experience_bank.errors import BadInput
from experience_bank.files import jsonl_text, sqlite_fault, sqlite_tables
from experience_bank.hashing import loads_strict
from safetensors import SafetensorError, safe_open


def read_text(path: str | Path, what: str) -> str:
    """A file's text, strictly UTF-8."""
    file = Path(path)
    if not file.is_file():
        raise BadInput(f"{what} {path} does not exist or is not a file: give the path of an existing file")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read {what} {path} ({exc.strerror}): check that the file is readable") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BadInput(f"{what} {path} line {line} is not UTF-8 (byte {exc.start}: {exc.reason}): "
                       "save the file as UTF-8") from None


def read_json(path: str | Path, what: str) -> Any:
    """The one JSON value in a file."""
    try:
        return loads_strict(read_text(path, what))
    except BadInput as exc:
        if str(exc).startswith(what):
            raise
        raise BadInput(f"{what} {path}: {exc}") from None


def json_kind(value: Any) -> str:
    """JSON's name for a parsed value's type (for messages)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "boolean"
    return {int: "number", float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def iter_jsonl_lines(path: str | Path, what: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line, each one checked to be a strict JSON object,
    read a line at a time (`experience_bank.files.jsonl_text`)."""
    if not Path(path).is_file():
        raise BadInput(f"{what} {path} does not exist or is not a file: give the path of an existing file")
    for n, line in jsonl_text(path, what):
        try:
            value = loads_strict(line)
        except BadInput as exc:
            raise BadInput(f"{what} {path} line {n}: {exc}") from None
        if not isinstance(value, dict):
            raise BadInput(f"{what} {path} line {n} is a JSON {json_kind(value)}, not an object: "
                           "give one JSON object per line")
        yield n, line


def check_jsonl(path: str | Path, what: str) -> int:
    """How many records a JSONL file holds, every line checked, none kept (at least one)."""
    count = sum(1 for _ in iter_jsonl_lines(path, what))
    if not count:
        raise BadInput(f"{what} {path} is empty: give one JSON object per line")
    return count


def jsonl_lines(path: str | Path, what: str, allow_empty: bool = False) -> list[tuple[int, str]]:
    """(line number, text) of every non-blank line, each one checked to be a strict JSON object."""
    rows = list(iter_jsonl_lines(path, what))
    if not rows and not allow_empty:
        raise BadInput(f"{what} {path} is empty: give one JSON object per line")
    return rows


def read_jsonl(path: str | Path, what: str) -> list[dict]:
    """The JSON object of every non-blank line (at least one)."""
    return [loads_strict(line) for _, line in jsonl_lines(path, what)]


BANK_TABLES = frozenset({"records"})
"""The table every bank has had since its first migration: a file without it is some other database."""


def check_bank_file(path: str | Path) -> None:
    """A bank path that exists must already be a bank: opening anything else would migrate it
    into one (a 0-byte file becomes a 90 KB bank; a run's ledger or checkpoints gain a bank's
    tables) before any refusal. An SQLite file with no tables at all has nothing to lose."""
    fault = sqlite_fault(path)
    if fault is None:
        tables = sqlite_tables(path)  # None: in use, its own open checks it
        if tables and not BANK_TABLES <= tables:
            raise BadInput(f"bank {path} is an SQLite database but not an experience bank (its tables: "
                           f"{', '.join(sorted(tables)[:6])}): give the path of a bank made by `agent bank init`, or a new path")
    elif fault == "missing":
        return
    elif fault == "not a file":
        raise BadInput(f"bank {path} is not a file: give the path of an SQLite bank (or a new path)")
    elif fault.startswith("damaged"):
        raise BadInput(f"bank {path} is {fault}: inspect it with sqlite3 {path} \"PRAGMA integrity_check\" "
                       "or restore a copy")
    elif fault.startswith("unreadable"):
        raise BadInput(f"cannot read bank {path} ({fault}): check that the file is readable")
    else:
        raise BadInput(f"bank {path} is {fault}: remove it, or give the path of a bank made by `agent bank init`")


def check_out_dir(path: str | Path, flag: str = "--out") -> None:
    """An output directory may be new or an existing directory, never an existing file."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise BadInput(f"{flag} {path} is an existing file: give a directory path")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise BadInput(f"{flag} {path} lies under {parent}, which is a file: give a directory path")


def check_out_file(path: str | Path, flag: str = "--out", *, new_folders: bool = False) -> None:
    """An output file may be new or an existing file (replaced), never a directory. Its folder must
    exist, or with `new_folders` (a command that creates it) must not lie under a file."""
    p = Path(path)
    if p.is_dir():
        raise BadInput(f"{flag} {path} is a directory: give a file path")
    if new_folders:
        check_out_dir(p.parent, f"{flag} {path}: its folder")
    elif not p.parent.is_dir():
        raise BadInput(f"{flag} {path}: folder {p.parent} does not exist; create it first")


def check_model_dir(path: str | Path, flag: str) -> None:
    """A local model folder that transformers can load: a config.json it reads, safetensors
    files whose headers parse and whose shapes fit that config, a tokenizer with a chat
    template. Cheap (no weights are read), and it runs before a trainer or evaluator writes
    its first file."""
    folder = Path(path)
    if not folder.is_dir():
        return  # not a local folder: a served model name or a hub id, checked by its backend
    config = read_json(folder / "config.json", f"{flag} model config")
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise BadInput(f"{flag} {path}/config.json has no model_type: give a folder saved by save_pretrained")
    model_config = _check_config(folder, flag)
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        raise BadInput(f"{flag} {path} holds no *.safetensors weights: give a folder saved by save_pretrained")
    shapes = {}
    for file in weights:
        shapes |= _check_safetensors(file, flag)
    _check_shapes(folder, model_config, shapes, flag)
    _check_tokenizer(folder, flag)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _check_config(folder: Path, flag: str):
    from transformers import AutoConfig  # noqa: PLC0415 (transformers)

    try:
        return AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"{flag} {folder}/config.json cannot be loaded by transformers ({_first_line(exc)}): "
                       "give a folder saved by save_pretrained") from None


def _check_tokenizer(folder: Path, flag: str) -> None:
    """Training and generation both apply the folder's chat template to every example."""
    from transformers import AutoTokenizer  # noqa: PLC0415 (transformers)

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"{flag} {folder} has no tokenizer transformers can load ({_first_line(exc)}): save the "
                       "tokenizer beside the weights") from None
    if tokenizer.chat_template is None:
        raise BadInput(f"{flag} {folder} has no chat template: save the tokenizer with one (chat_template.jinja)")


def _check_safetensors(file: Path, flag: str) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, from the file's header (no tensor data is read)."""
    try:
        with safe_open(str(file), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise BadInput(f"{flag} weights {file} cannot be read ({_first_line(exc)}): re-save the model with "
                       "save_pretrained") from None


def _check_shapes(folder: Path, model_config, shapes: dict[str, tuple[int, ...]], flag: str) -> None:
    """Every stored tensor the architecture also has must have the architecture's shape (transformers
    refuses a mismatch only while loading, after a trainer has made its run folder). The model is
    built on the meta device: no memory, no weights."""
    import torch  # noqa: PLC0415 (torch)
    from transformers import AutoModelForCausalLM  # noqa: PLC0415 (transformers)

    try:
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in AutoModelForCausalLM.from_config(model_config).state_dict().items()}
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise BadInput(f"{flag} {folder}: transformers cannot build a causal LM from config.json "
                       f"({_first_line(exc)}): give a causal language model folder") from None
    for name, shape in sorted(shapes.items()):
        if name in expected and expected[name] != shape:
            raise BadInput(f"{flag} {folder}: tensor {name} has shape {list(shape)} but config.json implies "
                           f"{list(expected[name])}: config.json and the weights are from different models")
