"""The openai proposer against a local OpenAI-compatible server (real client, real socket)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

import bank_factory as bf
from agent.proposer import Allowlist, OpenAIProposer, load_or_propose
from experience_bank.records import Proposal


def _card(cid: str, **changes) -> dict:
    body = bf.card(cid).model_dump(mode="json")
    for path, value in changes.items():
        node = body
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return body


REPLIES = {
    "valid": json.dumps({"cards": [_card("P-llm-1"), _card("P-llm-2")]}),
    "mixed": json.dumps({"cards": [
        _card("P-llm-1"),
        _card("P-llm-2", hparams__learning_rate=0.5),             # out of the schema's range
        _card("P-llm-3", hparams__trust_remote_code=True),        # unknown key
        _card("P-llm-4", hparams__learning_rate=5e-3),            # outside the allow-list range
        _card("S01"),                                             # shadows a library card
        _card("P-llm-6", data__mix=[{"dataset": {"id": "secret/train", "sha256": bf.sha("x")}, "weight": 1.0}]),
        _card("P-llm-7"), _card("P-llm-8"), _card("P-llm-9"),     # the last is over the quota
    ]}),
    "garbage": "Sure! Here are some ideas: train more, on better data.",
    "dupkeys": '{"cards": [], "cards": []}',
}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.requests.append(body)
        content = REPLIES[body["model"]]
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": content}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
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


def _proposer(url: str, model: str) -> OpenAIProposer:
    allow = Allowlist(datasets={"sql/source/train": bf.sha("data")}, taken_ids=frozenset({"S01"}))
    return OpenAIProposer(url, model, allow,
                          lambda c: Proposal(card=c, applicability=bf.applicability(), provenance=bf.provenance(c.id)),
                          limit=3, timeout_s=10)


def test_valid_cards_are_accepted(server):
    rows = _proposer(server, "valid")([])
    assert [r["status"] for r in rows] == ["accepted", "accepted"]
    assert all(r["hash"] for r in rows)
    assert Handler.requests[-1]["messages"][0]["role"] == "system"


def test_invalid_cards_are_rejected_with_reasons_never_repaired(server):
    rows = _proposer(server, "mixed")([])
    status = {json.loads(r["raw"])["id"]: (r["status"], r["reason"]) for r in rows}
    assert status["P-llm-1"][0] == "accepted"
    assert "learning_rate" in status["P-llm-2"][1] and status["P-llm-2"][0] == "rejected"
    assert "trust_remote_code" in status["P-llm-3"][1]
    assert "outside the allowed range" in status["P-llm-4"][1]
    assert "already in the library" in status["S01"][1]
    assert "not in this world" in status["P-llm-6"][1]
    assert [status[c][0] for c in ("P-llm-7", "P-llm-8", "P-llm-9")] == ["accepted", "accepted", "rejected"]
    assert "quota" in status["P-llm-9"][1]


@pytest.mark.parametrize("model, needle", [("garbage", "unparseable reply"), ("dupkeys", "duplicate JSON key")])
def test_garbage_is_one_rejected_row(server, model, needle):
    rows = _proposer(server, model)([])
    assert len(rows) == 1 and rows[0]["status"] == "rejected" and needle in rows[0]["reason"]


def test_unreachable_server_is_recorded_not_raised():
    rows = _proposer("http://127.0.0.1:9/v1", "valid")([])
    assert rows[0]["status"] == "rejected" and "request failed" in rows[0]["reason"]


def test_proposals_are_asked_once_per_episode(server, tmp_path):
    calls = []
    first = load_or_propose(tmp_path, lambda: calls.append(1) or _proposer(server, "valid")([]))
    again = load_or_propose(tmp_path, lambda: calls.append(1) or [])
    assert len(calls) == 1 and [e.hash for e in first] == [e.hash for e in again] and len(first) == 2
