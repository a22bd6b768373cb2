"""The openai proposer against a hostile server on 127.0.0.1 (issue 31): a gzip bomb, an endless
body, a drip of one byte at a time. Memory and time stay bounded; each reply is one rejected row.

The server's loops are bounded (a byte count and a wall-clock limit) and stop when the client
goes away, so no test can leave it running.
"""

from __future__ import annotations

import json
import socketserver
import threading
import time
import tracemalloc
import zlib

import openai  # noqa: F401 (imported before memory is traced: the proposer imports it lazily)
import pytest

from agent.config import RunConfig
from agent.loop.ports import WorldPorts
from agent.loop.proposer import MAX_REPLY_BYTES, Allowlist
from test_proposer import _world

BOMB_BYTES = 128 << 20
"""What the gzip bomb decodes to (128 MiB of zeros, 128 KiB on the wire)."""
ENDLESS_LIMIT = 96 << 20
"""Where the endless body stops if no one hangs up (the fixed code hangs up after 1 MiB)."""
DRIP_GAP_S, DRIP_LIMIT_S, DEADLINE_S = 0.25, 12.0, 1.5
"""A byte every 0.25 s for up to 12 s, against a proposer_timeout_s of 1.5 s (the issue's
'a byte every 2 s against 5 s', scaled down)."""


def _bomb() -> bytes:
    pack = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: a gzip member
    zeros = bytes(1 << 20)
    return b"".join(pack.compress(zeros) for _ in range(BOMB_BYTES >> 20)) + pack.flush()


class Hostile(socketserver.StreamRequestHandler):
    sent: dict[str, int] = {}
    bomb = b""

    def handle(self):
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            head += self.request.recv(4096)
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        body = head.split(b"\r\n\r\n", 1)[1]
        while len(body) < length:
            body += self.request.recv(65536)
        mode = json.loads(body)["model"]
        try:
            getattr(self, mode.replace("-", "_"))(mode)
        except OSError:
            pass  # the client hung up: what the fixed proposer does

    def _send(self, mode: str, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()
        Hostile.sent[mode] = Hostile.sent.get(mode, 0) + len(data)

    def gzip_bomb(self, mode):
        self._send(mode, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(self.bomb) + self.bomb)

    def endless(self, mode, status=b"200 OK"):
        self._send(mode, b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"10000\r\n" + b"7" * 0x10000 + b"\r\n"
        while Hostile.sent[mode] < ENDLESS_LIMIT:
            self._send(mode, chunk)

    def endless_error(self, mode):
        self.endless(mode, b"500 Internal Server Error")

    def _drip(self, mode, head: bytes, drops: bytes) -> None:
        self._send(mode, head)
        end = time.monotonic() + DRIP_LIMIT_S
        for byte in drops:
            if time.monotonic() > end:
                break
            time.sleep(DRIP_GAP_S)
            self._send(mode, bytes([byte]))

    def drip_body(self, mode):
        self._drip(mode, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n",
                   b"{" * 4096)

    def drip_headers(self, mode):
        self._drip(mode, b"HTTP/1.1 200 OK\r\n", b"X-Slow: " + b"a" * 4096)


@pytest.fixture(scope="module")
def hostile():
    Hostile.bomb, Hostile.sent = _bomb(), {}
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads, server.block_on_close = True, False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _propose(url: str, model: str, timeout_s: float = 10.0) -> tuple[list[dict], float, int]:
    """(rows, seconds, peak bytes allocated) of one real propose call through WorldPorts."""
    world = _world()
    cfg = RunConfig(world="test", proposer="openai", base_url=url, model=model, proposer_timeout_s=timeout_s)
    ports = WorldPorts(world, cfg, Allowlist(datasets=dict(world.datasets)), None)
    tracemalloc.start()
    began = time.monotonic()
    try:
        rows = ports.propose([])
        return rows, time.monotonic() - began, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_gzip_bomb_is_refused_unread(hostile):
    rows, _, peak = _propose(hostile, "gzip-bomb")
    assert len(rows) == 1 and rows[0]["status"] == "rejected" and "gzip-encoded" in rows[0]["reason"], rows
    assert peak < 8 << 20, peak  # it decodes to 128 MiB


@pytest.mark.parametrize("model", ["endless", "endless-error"])
def test_an_endless_body_is_cut_at_the_cap_while_it_is_read(hostile, model):
    rows, _, peak = _propose(hostile, model)
    assert len(rows) == 1 and rows[0]["status"] == "rejected", rows
    assert f"over {MAX_REPLY_BYTES} bytes: refused while reading it" in rows[0]["reason"], rows
    assert peak < 8 << 20, peak
    time.sleep(0.5)  # the server notices the hang-up
    assert Hostile.sent[model] < 32 << 20  # loopback buffers hold a few MiB beyond the 1 MiB read


@pytest.mark.parametrize("model", ["drip-body", "drip-headers"])
def test_a_drip_ends_at_the_total_deadline(hostile, model):
    rows, seconds, _ = _propose(hostile, model, timeout_s=DEADLINE_S)
    assert DEADLINE_S <= seconds < DEADLINE_S + 1.5, seconds  # the drip would go on for 12 s
    assert len(rows) == 1 and rows[0]["status"] == "rejected", rows
    assert f"passed its deadline of {DEADLINE_S:g} s" in rows[0]["reason"], rows
