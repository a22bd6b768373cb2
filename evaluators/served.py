"""A model evaluated through an OpenAI-compatible server (`backend: openai`, docs/gpu.md): which
name its requests ask for, and a LoRA child's adapter loaded into the server for its evaluation.

vLLM serves one base model under its folder path and, started with `--enable-lora` and
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, loads adapters at run time: `POST {base_url}/load_lora_adapter`
`{"lora_name", "lora_path"}`, `POST {base_url}/unload_lora_adapter` `{"lora_name"}`; a request with
`model=<lora_name>` then generates with base + adapter. So a child that kept its adapter (a LoRA
run) is evaluated on the served base by loading that adapter under a name derived from the child's
weights hash (stable across processes, and two children never share one), and unloading it after,
also when the evaluation fails. A full-weights model can be evaluated only where the server serves
it itself (`vllm serve FOLDER`); anything else is one line naming the fix. A name that is not a
local folder is a served model, requested as it is.

Every exchange with the server other than generation goes through `BoundedHTTP` (a deadline for the
whole exchange, a cap on the reply); every failure is one BadInput line naming `base_url`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2

from evaluators import models
from evaluators.bounded_http import BoundedHTTP
from experience_bank.errors import BadInput
from experience_bank.hashing import sha256_text

BASE_URL_ENV = "OPENAI_BASE_URL"
"""Where the openai client sends generation requests; load and unload go to the same server."""
LOAD_DEADLINE_S = 120.0
"""A load reads the adapter from disk into the engine: seconds for a LoRA of a few GB models."""
CALL_DEADLINE_S = 30.0
"""Listing models and unloading an adapter."""
MAX_REPLY_BYTES = 1 << 20
SERVER_FIX = ("start it with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve BASE --enable-lora` "
              "(docs/gpu.md), or set OPENAI_BASE_URL to the server that runs")


@dataclass(frozen=True)
class Served:
    """How an evaluation asks the server for one model."""

    name: str
    """The `model` of every generation request."""
    model_sha256: str
    """The weights the numbers are of: the local folder's hash, or the served name's."""
    adapter: str | None = None
    """The adapter folder loaded for this evaluation (None: nothing loaded)."""


def base_url() -> str:
    """The server's base URL (`http://HOST:PORT/v1`); BadInput when it is not set."""
    url = os.environ.get(BASE_URL_ENV, "").strip().rstrip("/")
    if not url:
        raise BadInput(f"backend openai needs {BASE_URL_ENV}=http://HOST:PORT/v1 (the vLLM server's address): "
                       "export it (docs/gpu.md)")
    return url


def adapter_name(child_sha256: str) -> str:
    """The served name of a child's adapter: from its weights hash, so the same child always has
    the same name and two children never one."""
    return f"child-{child_sha256[:24]}"


def _call(method: str, path: str, body: dict | None, deadline_s: float) -> tuple[int, str]:
    """(status, reply text) of one bounded request to the server; BadInput when none came."""
    url = base_url()
    headers = {"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"} if os.environ.get("OPENAI_API_KEY") else {}
    with BoundedHTTP(MAX_REPLY_BYTES, deadline_s) as http:
        try:
            reply = http.client.request(method, f"{url}/{path}", json=body, headers=headers)
            return reply.status_code, reply.text
        except httpx2.HTTPError as exc:
            why = f"no answer within {deadline_s:g} s" if http.expired else f"{type(exc).__name__}: {exc}"
            raise BadInput(f"the OpenAI-compatible server at {url} cannot be reached ({why}): {SERVER_FIX}") from None


def _message(text: str) -> str:
    """The server's own error message (vLLM: {"error": {"message"}} or {"message"}; FastAPI: {"detail"})."""
    try:
        doc = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(doc, dict):
        inner = doc.get("error") if isinstance(doc.get("error"), dict) else doc
        msg = inner.get("message") or inner.get("detail") or doc.get("detail")
        if msg:
            return " ".join(str(msg).split())[:200]
    return " ".join(text.split())[:200]


def served_models() -> list[dict]:
    """The server's `GET /models` list (ids and roots; adapters carry a parent)."""
    status, text = _call("GET", "models", None, CALL_DEADLINE_S)
    try:
        data = json.loads(text)["data"] if status == 200 else None
    except (ValueError, KeyError, TypeError):
        data = None
    if not isinstance(data, list):
        raise BadInput(f"the server at {base_url()} gave no model list (GET /models: HTTP {status}, "
                       f"{_message(text)}): {SERVER_FIX}")
    return [m for m in data if isinstance(m, dict)]


def _same_path(a: str, b: str) -> bool:
    return a == b or ((os.path.isabs(a) or os.path.exists(a)) and os.path.realpath(a) == os.path.realpath(b))


def _base_names(listing: list[dict]) -> list[tuple[str, str]]:
    """(id, root) of each base model the server serves (adapters name a parent)."""
    return [(str(m.get("id", "")), str(m.get("root") or m.get("id", ""))) for m in listing if not m.get("parent")]


def _served_as(folder: str, listing: list[dict]) -> str | None:
    return next((mid for mid, root in _base_names(listing) if _same_path(folder, mid) or _same_path(folder, root)), None)


def _adapter_base(adapter: Path) -> str:
    try:
        config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
        return str(config["base_model_name_or_path"])
    except (OSError, ValueError, KeyError, TypeError):
        raise BadInput(f"{adapter}/adapter_config.json is not a PEFT adapter config naming its base model: "
                       "the child's run did not keep a usable adapter; evaluate it with backend transformers") from None


def resolve(model_dir: str, adapter_dir: str | None) -> Served:
    """How to ask the server for `model_dir`; BadInput (one line) when the server cannot serve it."""
    folder = Path(model_dir)
    if not folder.is_dir():
        return Served(str(model_dir), sha256_text(f"served:{model_dir}"))
    sha = models.weights_sha256(folder)
    listing = served_models()
    name = _served_as(str(folder), listing)
    if name is not None:  # served as itself: asked for directly, nothing to load
        return Served(name, sha)
    if adapter_dir is None:
        raise BadInput(f"{folder} is a full-weights model, not a LoRA adapter, and the server at {base_url()} "
                       f"does not serve it (it serves {', '.join(m for m, _ in _base_names(listing)) or 'nothing'}): "
                       f"serve it as its own model (`vllm serve {folder}`) or evaluate it with backend transformers")
    adapter = Path(adapter_dir).resolve()
    trained_on = _adapter_base(adapter)
    if _served_as(trained_on, listing) is None:
        raise BadInput(f"the adapter of {folder} was trained on {trained_on}, which the server at {base_url()} does "
                       f"not serve: serve that model (`vllm serve {trained_on} --enable-lora`) or evaluate the child "
                       "with backend transformers")
    return Served(adapter_name(sha), sha, str(adapter))


def _load(served: Served) -> bool:
    """Load the adapter; False when the server already holds it under this name (loaded by another
    evaluation of the same child: it stays theirs to unload)."""
    status, text = _call("POST", "load_lora_adapter", {"lora_name": served.name, "lora_path": served.adapter},
                         LOAD_DEADLINE_S)
    if status == 200:
        return True
    msg = _message(text)
    if status == 400 and "already been loaded" in msg:
        return False
    if status == 404 and "not found" in msg.lower() and "adapter" not in msg.lower():
        raise BadInput(f"the server at {base_url()} has no load_lora_adapter route (HTTP 404): {SERVER_FIX}")
    raise BadInput(f"the server at {base_url()} refused to load adapter {served.adapter} as {served.name} "
                   f"(HTTP {status}: {msg}): {SERVER_FIX}, with --max-lora-rank at least the adapter's rank")


def _unload(served: Served) -> None:
    """Unload the adapter; a failure is a warning (the numbers stand; the server keeps a spare adapter)."""
    try:
        status, text = _call("POST", "unload_lora_adapter", {"lora_name": served.name}, CALL_DEADLINE_S)
    except BadInput as exc:
        warnings.warn(f"adapter {served.name} was not unloaded: {exc}", stacklevel=2)
        return
    if status != 200:
        warnings.warn(f"the server at {base_url()} did not unload adapter {served.name} (HTTP {status}: "
                      f"{_message(text)})", stacklevel=2)


@contextmanager
def serve(model_dir: str, adapter_dir: str | None = None) -> Iterator[Served]:
    """The name to evaluate `model_dir` by, its adapter (if any) loaded for the block and unloaded
    after it, however it ends."""
    served = resolve(model_dir, adapter_dir)
    loaded = served.adapter is not None and _load(served)
    try:
        yield served
    finally:
        if loaded:
            _unload(served)
