"""Candidate proposals: the catalogue (the bank's library) plus, optionally, an LLM.

The LLM proposer asks an OpenAI-compatible endpoint (the real `openai` client) for at most q
new candidate cards as JSON, each with the needs it declares (`Needs`: datasets, runtime,
output protocol, stage limit, chat template, named hard conflicts), from which its B_i is
built. Every reply is untrusted input: the HTTP body is parsed strictly here (UTF-8, bounded
JSON, a strict reply model), each item strictly against `ProposedCard` (unknown keys,
coercion, NaN, duplicate keys all refused), then checked against an allow-list of datasets
(id and hash), methods and hyper-parameter ranges, and its needs against the card. Whatever
fails, a whole reply or one item, is recorded in `runs/ID/proposals.json` as rejected with
its reason, and the episode goes on with the catalogue; nothing is ever repaired. The file is written once, so a re-run of the propose node after a crash
reads the same proposals back instead of asking the LLM again.

Out of scope: ranking proposals, multi-turn refinement, tool calls.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from agent.inputs import read_json
from evaluators.bounded_http import BoundedHTTP
from agent.loop.state import Entry
from agent.run.rundir import RunDir
from agent.world.catalogue import Needs
from experience_bank.files import write_atomic
from experience_bank.errors import BadInput
from experience_bank.families import FAMILIES
from experience_bank.hashing import canonical_json, content_hash, loads_strict
from experience_bank.cards import CandidateCard
from experience_bank.frozen import parse_model
from experience_bank.records import Proposal, parse_record

MAX_RAW = 2000
"""Characters of a rejected item's raw text kept in proposals.json."""


@dataclass(frozen=True)
class Allowlist:
    """What an LLM-proposed card may use (frozen in the manifest)."""

    datasets: dict[str, str]
    """Dataset id -> content hash available in this world."""
    methods: tuple[str, ...] = ("sft", "grpo")
    families: tuple[str, ...] = FAMILIES
    learning_rate: tuple[float, float] = (1e-6, 3e-3)
    batch_size: tuple[int, int] = (1, 64)
    n_examples: tuple[int, int] = (16, 4096)
    steps: tuple[int, int] = (1, 2000)
    device_hours: tuple[float, float] = (0.01, 12.0)
    max_length: tuple[int, int] = (16, 1024)
    taken_ids: frozenset[str] = field(default_factory=frozenset)
    """Card ids already in the library (a proposal may not shadow one)."""

    def manifest(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "taken_ids"}
        return json.loads(json.dumps(d))


def _within(name: str, value: float, bounds: tuple[float, float]) -> None:
    lo, hi = bounds
    if not lo <= value <= hi:
        raise BadInput(f"{name} {value} is outside the allowed range [{lo}, {hi}]")


def check_card(card: CandidateCard, allow: Allowlist) -> None:
    """BadInput naming the first allow-list violation."""
    if card.id in allow.taken_ids:
        raise BadInput(f"card id {card.id} is already in the library: propose a new id")
    if card.method not in allow.methods:
        raise BadInput(f"method {card.method} is not allowed")
    if card.family not in allow.families:
        raise BadInput(f"family {card.family} is not allowed")
    for mix in card.data.mix:
        known = allow.datasets.get(mix.dataset.id)
        if known is None:
            raise BadInput(f"dataset {mix.dataset.id} is not in this world")
        if known != mix.dataset.sha256:
            raise BadInput(f"dataset {mix.dataset.id} hash does not match this world's copy")
    if card.data.replay_share > 0:
        raise BadInput("replay is not allowed in LLM proposals")
    _within("learning_rate", card.hparams.learning_rate, allow.learning_rate)
    _within("batch_size", card.hparams.batch_size, allow.batch_size)
    _within("max_length", card.hparams.max_length, allow.max_length)
    _within("n_examples", card.data.n_examples, allow.n_examples)
    _within("budget.steps", card.budget.steps, allow.steps)
    _within("budget.device_hours", card.budget.device_hours, allow.device_hours)


class ProposedCard(BaseModel):
    """One item of an LLM reply: the card and the needs it declares (the proposal's B_i comes
    from these, never from the catalogue)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    card: CandidateCard
    """The atomic update."""
    needs: Needs
    """What it needs of the context: datasets, runtime, output protocol, stage limit, chat
    template, named hard conflicts."""


def parse_cards(text: str) -> list[Any]:
    """The list of items in an LLM reply: a JSON list, or {"cards": [...]}."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    data = loads_strict(body)
    if isinstance(data, dict) and set(data) == {"cards"}:
        data = data["cards"]
    if not isinstance(data, list):
        raise BadInput('the reply is not a JSON list of cards nor {"cards": [...]}')
    return data


def judge(items: list[Any], allow: Allowlist, limit: int,
          to_proposal: Callable[[CandidateCard, Needs], Proposal]) -> list[dict[str, Any]]:
    """Accept or reject every proposed item, in order, each with its reason."""
    out, accepted, ids = [], 0, set()
    for i, item in enumerate(items):
        raw = json.dumps(item, ensure_ascii=False)[:MAX_RAW]
        row = {"index": i, "status": "rejected", "reason": "", "raw": raw, "record": None, "hash": None}
        try:
            if accepted >= limit:
                raise BadInput(f"over the quota of {limit} proposals per episode")
            proposed = parse_model(ProposedCard, json.dumps(item), "proposed card")
            check_card(proposed.card, allow)
            if proposed.card.id in ids:
                raise BadInput(f"card id {proposed.card.id} proposed twice")
            proposal = to_proposal(proposed.card, proposed.needs)
            row |= {"status": "accepted", "reason": "valid", "record": canonical_json(proposal),
                    "hash": content_hash(proposal)}
            accepted, ids = accepted + 1, ids | {proposed.card.id}
        except BadInput as exc:
            row["reason"] = str(exc)[:500]
        out.append(row)
    return out


def _prompt(library: list[Entry], allow: Allowlist, limit: int) -> list[dict[str, str]]:
    schema = json.dumps(ProposedCard.model_json_schema())
    known = ", ".join(sorted(e.record.card.id for e in library))
    return [{"role": "system", "content": (
        "You propose post-training updates as JSON candidate cards, each with the needs it has of the "
        f'training context. Reply with only a JSON object {{"cards": [...]}} holding at most {limit} items '
        f"that follow this JSON schema exactly: {schema}")},
        {"role": "user", "content": (
            f"Datasets available (id -> sha256): {json.dumps(allow.datasets)}. Allowed ranges: "
            f"{json.dumps(allow.manifest())}. Cards already known: {known}. Propose new ids.")}]


MAX_REPLY_BYTES = 1 << 20
"""Largest reply body read (1 MiB; at most three cards are asked for)."""


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")
    content: str


class _Choice(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")
    message: _Message


class ChatReply(BaseModel):
    """The part of an OpenAI chat-completion body the proposer reads (other fields ignored)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")
    choices: tuple[_Choice, ...] = Field(min_length=1)
    """At least one choice; the first one's message content is the reply text."""


def reply_text(body: bytes) -> str:
    """The first choice's content from a raw response body; BadInput on any malformation.

    The body is parsed here (strict UTF-8, `loads_strict`, a strict model), not by the client,
    because the client's own parser raises outside its error types on hostile bodies (a
    5,000-digit integer, 100,000 levels of nesting, HTML with status 200)."""
    if len(body) > MAX_REPLY_BYTES:
        raise BadInput(f"reply body of {len(body)} bytes is over {MAX_REPLY_BYTES}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"reply body is not UTF-8 (byte {exc.start})") from None
    return parse_model(ChatReply, text, "chat completion").choices[0].message.content


@dataclass(frozen=True)
class OpenAIProposer:
    base_url: str
    model: str
    allow: Allowlist
    to_proposal: Callable[[CandidateCard, Needs], Proposal]
    limit: int = 3
    timeout_s: float = 60.0

    def _ask(self, library: list[Entry]) -> bytes:
        import openai  # noqa: PLC0415


        # timeout_s is the whole request's deadline and MAX_REPLY_BYTES the most read of any body.
        with BoundedHTTP(MAX_REPLY_BYTES, self.timeout_s) as http:
            client = openai.OpenAI(base_url=self.base_url, api_key=os.environ.get("OPENAI_API_KEY", "unused"),
                                   timeout=self.timeout_s, max_retries=0, http_client=http.client)
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=self.model, temperature=0.0, messages=_prompt(library, self.allow, self.limit))
                return raw.content
            except openai.OpenAIError as exc:
                if http.expired:
                    raise BadInput(f"proposer request passed its deadline of {self.timeout_s:g} s "
                                   "(proposer_timeout_s)") from None
                raise BadInput(f"proposer request failed: {type(exc).__name__}: {exc}") from None

    def __call__(self, library: list[Entry]) -> list[dict[str, Any]]:
        """Every reply, however broken, becomes rows: accepted proposals or rejections with reasons."""
        try:
            body = self._ask(library)
        except BadInput as exc:
            return [_whole_reply_rejected(str(exc), "")]
        try:
            items = parse_cards(reply_text(body))
        except BadInput as exc:
            return [_whole_reply_rejected(f"unparseable reply: {exc}", body.decode("utf-8", "replace"))]
        return judge(items, self.allow, self.limit, self.to_proposal)


def _whole_reply_rejected(reason: str, raw: str) -> dict[str, Any]:
    return {"index": -1, "status": "rejected", "reason": reason[:500], "raw": raw[:MAX_RAW], "record": None,
            "hash": None}


def load_proposals(run_dir: Path) -> list[Entry]:
    """Accepted proposals of a run (empty before the propose node ran)."""
    path = RunDir(Path(run_dir)).proposals_file
    if not path.exists():
        return []
    rows = read_json(path, "proposals file")
    try:
        accepted = [r for r in rows if r["status"] == "accepted"]
        entries = [Entry(r["hash"], parse_record(r["record"])) for r in accepted]
    except (TypeError, KeyError, BadInput) as exc:
        raise BadInput(f"proposals file {path} is damaged ({exc}): restore it, or start a new run") from None
    if any(e.hash != content_hash(e.record) for e in entries):
        raise BadInput(f"proposals file {path} holds a record that does not match its hash: restore it")
    return entries


def load_or_propose(run_dir: Path, produce: Callable[[], list[dict[str, Any]]]) -> list[Entry]:
    """Ask once per episode; proposals.json is the frozen answer."""
    path = RunDir(Path(run_dir)).proposals_file
    if not path.exists():
        write_atomic(path, json.dumps(produce(), indent=1, ensure_ascii=False))
    return load_proposals(run_dir)
