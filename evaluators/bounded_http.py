"""An HTTP client for the `openai` client whose exchange is bounded in bytes and in total time,
so a broken or hostile endpoint costs the proposer at most `max_bytes` and `deadline_s`.

- Bytes: the request asks for the identity encoding, and a response compressed anyway is
  refused before its body is read (a 4 MB gzip body decodes to gigabytes; nothing here needs
  compression). The body is counted while it is read, whoever reads it (the openai client
  reads error bodies itself), and refused one chunk past the cap.
- Time: httpx's timeouts are per read, so a server sending a byte every 2 s never trips a 5 s
  one. A timer shuts the connection's socket down at the deadline, which ends any read or
  write blocked on it (headers included); `expired` then tells the caller why it failed.

Out of scope: the name lookup before connecting (the system resolver keeps its own timeouts).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx2

from experience_bank.errors import BadInput


class _Capped(httpx2.SyncByteStream):
    """A response body that raises BadInput once more than `max_bytes` of it have arrived."""

    def __init__(self, inner: httpx2.SyncByteStream, max_bytes: int):
        self.inner, self.max_bytes = inner, max_bytes

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self.inner:
            seen += len(chunk)
            if seen > self.max_bytes:
                raise BadInput(f"reply body is over {self.max_bytes} bytes: refused while reading it")
            yield chunk

    def close(self) -> None:
        self.inner.close()


class BoundedHTTP:
    """Use as `with BoundedHTTP(cap, deadline) as http:` and pass `http.client` to openai.OpenAI."""

    def __init__(self, max_bytes: int, deadline_s: float):
        self.max_bytes, self.deadline_s = max_bytes, deadline_s
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._guard = threading.Lock()
        self._timer = threading.Timer(deadline_s, self._expire)
        self._timer.daemon = True
        self.client = httpx2.Client(timeout=deadline_s, follow_redirects=True,
                                    event_hooks={"request": [self._on_request], "response": [self._on_response]})

    def __enter__(self) -> "BoundedHTTP":
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        self.client.close()

    def _expire(self) -> None:
        with self._guard:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def _on_request(self, request: httpx2.Request) -> None:
        request.headers["Accept-Encoding"] = "identity"
        request.extensions = {**request.extensions, "trace": self._trace}

    def _trace(self, event: str, info: dict) -> None:
        # httpcore reports each new connection's stream: its socket is what the timer shuts.
        if event in ("connection.connect_tcp.complete", "connection.connect_unix_socket.complete"):
            sock = info["return_value"].get_extra_info("socket")
            with self._guard:
                self._sockets.append(sock)
                if self.expired:
                    _shut(sock)

    def _on_response(self, response: httpx2.Response) -> None:
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise BadInput(f"reply body is {encoding}-encoded though identity was asked for: refused unread")
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise BadInput(f"reply body of {declared} bytes is over {self.max_bytes}: refused unread")
        response.stream = _Capped(response.stream, self.max_bytes)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: nothing left to end
