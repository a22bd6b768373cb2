"""The openai proposer against a local OpenAI-compatible server (real client, real socket), through
the real `WorldPorts.propose` and `to_proposal`: a proposal's B_i comes from the needs it declares.

The episode tests drive the real loop (propose, filter, compile, authorize, commit) with fakes only
at the trainer and evaluator boundary (tests/support/graph_fakes.py), and check that an LLM proposal
is decided by Eq. 13's new-proposal branch under the quota q = 3, and that every hostile reply
becomes one recorded rejection while the episode goes on with the catalogue.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from support import bank_factory as bf
from support import graph_fakes as tgf
from agent.config import RunConfig
from agent.loop.ports import WorldPorts
from agent.loop.proposer import Allowlist, load_or_propose
from agent.world.store import World
from experience_bank.records import ModelRef, Proposal, parse_record

NEEDS = {"datasets": ["sql/source/train"], "runtime": "peft-lora", "output_protocol": "sql"}
"""What bank_factory's card (LoRA SFT on sql/source/train) needs."""


def _item(cid: str, needs: dict | None = None, **changes) -> dict:
    body = bf.card(cid).model_dump(mode="json")
    for path, value in changes.items():
        node = body
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return {"card": body, "needs": NEEDS if needs is None else needs}


def _completion(content) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}).encode()


CONFLICT = {"name": "needs a parent before its first promotion", "field": "stage", "op": "gt", "value": 0}

REPLIES = {
    "valid": json.dumps({"cards": [_item("P-llm-1", NEEDS | {"conflicts": [CONFLICT]}), _item("P-llm-2")]}),
    "mixed": json.dumps({"cards": [
        _item("P-llm-1"),
        _item("P-llm-2", hparams__learning_rate=0.5),             # out of the schema's range
        _item("P-llm-3", hparams__trust_remote_code=True),        # unknown key
        _item("P-llm-4", hparams__learning_rate=5e-3),            # outside the allow-list range
        _item("S01"),                                             # shadows a library card
        _item("P-llm-6", data__mix=[{"dataset": {"id": "secret/train", "sha256": bf.sha("x")}, "weight": 1.0}]),
        _item("P-llm-7", NEEDS | {"runtime": "trl-sft"}),         # needs contradict the card (LoRA)
        _item("P-llm-8", NEEDS | {"datasets": ["sql/target/train"]}),  # declares another dataset
        _item("P-llm-9", {"runtime": "peft-lora"}),               # needs incomplete
        _item("P-llm-10", NEEDS | {"max_stage": True}),           # a bool is not a stage
        bf.card("P-llm-11").model_dump(mode="json"),              # a bare card, no needs
        _item("P-llm-12"), _item("P-llm-13"), _item("P-llm-14"),  # the last is over the quota
    ]}),
    "garbage": "Sure! Here are some ideas: train more, on better data.",
    "dupkeys": '{"cards": [], "cards": []}',
    "bigint-content": '{"cards": [' + "7" * 5000 + "]}",
    "deep-content-3000": "[" * 3000 + "]" * 3000,
    "deep-content-100000": "[" * 100_000 + "]" * 100_000,
    "fenced": "```json\n" + json.dumps({"cards": [_item("P-llm-1")]}) + "\n```",
}

HOSTILE_BODIES = {  # model name -> (raw body with status 200, a word the rejection reason holds)
    "bigint-body": (b'{"created": ' + b"9" * 5000 + b', "choices": []}', "64 bits"),
    "deep-body-3000": (b'{"choices": ' + b"[" * 3000 + b"]" * 3000 + b"}", "nested"),
    "deep-body-100000": (b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
    "choices-empty": (b'{"id": "x", "choices": []}', "choices"),
    "choices-missing": (b'{"id": "x"}', "choices"),
    "message-missing": (b'{"choices": [{"index": 0, "finish_reason": "stop"}]}', "message"),
    "content-list": (_completion([{"type": "text", "text": "{}"}]), "content"),
    "content-number": (_completion(42), "content"),
    "content-null": (_completion(None), "content"),
    "html": (b"<html><body><h1>502 Bad Gateway</h1></body></html>", "not valid JSON"),
    "latin1": ('{"choices": [{"message": {"content": "caf\u00e9"}}]}'.encode("latin-1"), "not UTF-8"),
    "utf16": ('{"choices": []}'.encode("utf-16"), "not UTF-8"),
    "not-json": (b"ok", "not valid JSON"),
    "empty-body": (b"", "not valid JSON"),
    "a-list": (b"[1, 2, 3]", "chat completion"),
    "nan": (b'{"choices": NaN}', "NaN"),
}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.requests.append(body)
        name = body["model"]
        status, data = (500, b'{"error": {"message": "boom"}}') if name == "status-500" else (
            200, HOSTILE_BODIES[name][0] if name in HOSTILE_BODIES else _completion(REPLIES[name]))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    Handler.requests = []
    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def _world() -> World:
    """The world record the ports read (ids and hashes only: nothing here trains or evaluates)."""
    model = ModelRef(id="world-test/base", sha256=bf.sha("model"), arch="qwen3", chat_template_sha256=bf.sha("tpl"))
    return World(size="test", seed=0, recipe_sha256=bf.sha("recipe"), root="/nonexistent",
                 base_dir="/nonexistent/base", model=model, chat_template_sha256=bf.sha("tpl"),
                 datasets={"sql/source/train": bf.sha("data")})


def _ports(url: str, model: str, taken=("S01",), cls=WorldPorts, manifest=None, *extra) -> WorldPorts:
    """Real ports; proposing reads no manifest, so the proposer tests pass none."""
    world = _world()
    allow = Allowlist(datasets=dict(world.datasets), taken_ids=frozenset(taken))
    cfg = RunConfig(world="test", proposer="openai", base_url=url, model=model, proposer_timeout_s=10.0)
    return cls(world, cfg, allow, manifest, *extra)


def test_valid_cards_are_accepted_with_their_declared_needs(server):
    rows = _ports(server, "valid").propose([])
    assert [r["status"] for r in rows] == ["accepted", "accepted"]
    assert Handler.requests[-1]["messages"][0]["role"] == "system"
    assert '"needs"' in Handler.requests[-1]["messages"][0]["content"]  # the schema asks for them
    first = parse_record(rows[0]["record"])
    assert isinstance(first, Proposal) and first.applicability.runtime == "peft-lora"
    assert [c.name for c in first.applicability.conflicts] == [
        "requires output protocol sql", "needs dataset sql/source/train", "requires runtime peft-lora",
        CONFLICT["name"]]
    assert first.applicability.parent_arch == "qwen3" and first.provenance.produced_by == "proposer openai valid"


def test_invalid_cards_are_rejected_with_reasons_never_repaired(server):
    rows = _ports(server, "mixed").propose([])
    status = {json.loads(r["raw"]).get("card", json.loads(r["raw"])).get("id"): (r["status"], r["reason"])
              for r in rows}
    assert status["P-llm-1"][0] == "accepted"
    assert "learning_rate" in status["P-llm-2"][1] and status["P-llm-2"][0] == "rejected"
    assert "trust_remote_code" in status["P-llm-3"][1]
    assert "outside the allowed range" in status["P-llm-4"][1]
    assert "already in the library" in status["S01"][1]
    assert "not in this world" in status["P-llm-6"][1]
    assert "declares runtime trl-sft but its method and adapter need peft-lora" in status["P-llm-7"][1]
    assert "declares datasets ['sql/target/train'] but trains on ['sql/source/train']" in status["P-llm-8"][1]
    assert "needs.datasets" in status["P-llm-9"][1] and "needs.max_stage" in status["P-llm-10"][1]
    assert "field card: Field required" in status["P-llm-11"][1]
    assert [status[c][0] for c in ("P-llm-12", "P-llm-13", "P-llm-14")] == ["accepted", "accepted", "rejected"]
    assert "quota" in status["P-llm-14"][1]


@pytest.mark.parametrize("model, needle", [
    ("garbage", "unparseable reply"), ("dupkeys", "duplicate JSON key"), ("bigint-content", "64 bits"),
    ("deep-content-3000", "nested 3000 levels"), ("deep-content-100000", "nested 100000 levels"),
    *[(name, needle) for name, (_, needle) in HOSTILE_BODIES.items()], ("status-500", "request failed"),
])
def test_every_hostile_reply_is_one_rejected_row(server, model, needle):
    rows = _ports(server, model).propose([])
    assert len(rows) == 1 and rows[0]["status"] == "rejected" and needle in rows[0]["reason"], rows
    json.dumps(rows, ensure_ascii=False).encode("utf-8")  # proposals.json can always be written


def test_a_fenced_reply_is_read(server):
    rows = _ports(server, "fenced").propose([])
    assert [(r["status"], r["reason"]) for r in rows] == [("accepted", "valid")]


def test_unreachable_server_is_recorded_not_raised():
    rows = _ports("http://127.0.0.1:9/v1", "valid").propose([])
    assert rows[0]["status"] == "rejected" and "request failed" in rows[0]["reason"]


def test_proposals_are_asked_once_per_episode(server, tmp_path):
    calls, ports = [], _ports(server, "valid")
    first = load_or_propose(tmp_path, lambda: calls.append(1) or ports.propose([]))
    again = load_or_propose(tmp_path, lambda: calls.append(1) or [])
    assert len(calls) == 1 and [e.hash for e in first] == [e.hash for e in again] and len(first) == 2


# --- a whole episode: the real proposer, compiler and authorizer; fake training and evaluation ---


class EpisodePorts(WorldPorts):
    """WorldPorts with the trainer/evaluator boundary replaced by tests/support/graph_fakes.py's fakes."""

    def __init__(self, world, cfg, allow, manifest, run_dir):
        super().__init__(world, cfg, allow, manifest)
        self.fake = tgf.FakePorts(run_dir)

    def evaluate(self, *a):
        return self.fake.evaluate(*a)

    def trial(self, *a):
        return self.fake.trial(*a)

    def train(self, *a):
        return self.fake.train(*a)

    def gate(self, *a):
        return self.fake.gate(*a)

    def promote(self, *a):
        return self.fake.promote(*a)

    def captrack(self, *a):
        return self.fake.captrack(*a)

    def observation(self, *a):
        return self.fake.observation(*a)

    def target_metric(self, card):
        return self.fake.target_metric(card)


def _episode(tmp_path, monkeypatch, url: str, model: str):
    from agent.loop.episode import drive

    run_dir = tmp_path / "E-fake"
    ctx, initial, bank = tgf.make_ctx(run_dir, max_rejections=50)
    ids = [e.record.card.id for e in ctx.entries.values()]
    ctx.ports = _ports(url, model, ids, EpisodePorts, ctx.manifest, run_dir)
    for cid in ids:  # the real authorizer routes these; any trial of theirs fails, any full run gains nothing
        monkeypatch.setitem(tgf.PLAN, cid, ("real", "fail", 0.0))
    monkeypatch.setitem(tgf.PLAN, "P-llm-1", ("validate", "fail", 0.0))
    monkeypatch.setitem(tgf.PLAN, "P-llm-2", ("validate", "pass", 3.0))
    try:
        final = drive(ctx, initial, run_dir / "checkpoints.sqlite")
        return final, bank.events("E-fake"), json.loads((run_dir / "proposals.json").read_text()), ids
    finally:
        bank.close()


def test_an_episode_decides_llm_proposals_by_the_new_proposal_branch(server, tmp_path, monkeypatch):
    final, events, rows, library = _episode(tmp_path, monkeypatch, server, "valid")
    assert [r["status"] for r in rows] == ["accepted", "accepted"]
    by_id = {e.candidate_id: e for e in events}
    assert set(by_id) == set(library) | {"P-llm-1", "P-llm-2"}
    for cid in ("P-llm-1", "P-llm-2"):
        d = by_id[cid].decision
        assert d.features.is_new and d.features.S is None and d.features.H == 0
        assert (d.action, d.rule) == ("validate", "bcit.new_validate")
        assert d.numbers["quota"] == 3.0
    assert by_id["P-llm-1"].decision.numbers["quota_used"] == 0.0
    assert by_id["P-llm-2"].decision.numbers["quota_used"] == 1.0
    assert by_id["P-llm-1"].outcome == "trial_failed" and by_id["P-llm-2"].outcome == "promoted"
    assert final["proposals_authorized"] == 2 and final["stop_reason"] == "candidates_exhausted"


@pytest.mark.parametrize("model", ["bigint-body", "deep-body-100000", "choices-empty", "html", "latin1"])
def test_a_hostile_reply_is_recorded_and_the_episode_goes_on(server, tmp_path, monkeypatch, model):
    final, events, rows, library = _episode(tmp_path, monkeypatch, server, model)
    assert len(rows) == 1 and rows[0]["status"] == "rejected" and rows[0]["reason"]
    assert sorted(e.candidate_id for e in events) == sorted(library)
    assert final["stop_reason"] == "candidates_exhausted" and final["proposals_authorized"] == 0


@pytest.mark.parametrize("text, needle", [
    ("[", "not valid JSON"), ('{"a": 1}', "damaged"), ('[{"status": "accepted"}]', "damaged"),
    ('[{"status": "accepted", "hash": "x", "record": "{}"}]', "damaged"), ("[" * 5000, "nested"),
])
def test_a_damaged_proposals_file_is_one_line(tmp_path, text, needle):
    from agent.loop.proposer import load_proposals
    from experience_bank.errors import BadInput

    (tmp_path / "proposals.json").write_text(text)
    with pytest.raises(BadInput, match=needle):
        load_proposals(tmp_path)


def test_a_proposal_edited_after_acceptance_is_refused(server, tmp_path):
    from agent.loop.proposer import load_proposals
    from experience_bank.errors import BadInput

    rows = _ports(server, "valid").propose([])
    rows[0]["record"] = rows[0]["record"].replace("card P-llm-1", "card P-llm-X")
    (tmp_path / "proposals.json").write_text(json.dumps(rows))
    with pytest.raises(BadInput, match="does not match its hash"):
        load_proposals(tmp_path)
