"""backend openai with a LoRA child: the child's adapter is loaded into the OpenAI-compatible server
(vLLM's runtime LoRA routes) before its evaluation, every generation request names it, and it is
unloaded after, also when the evaluation fails; what the server cannot serve is one line.

The server is real HTTP on a local port (http.server in a thread), answering the routes vLLM's
server has: GET /v1/models, POST /v1/load_lora_adapter, /v1/unload_lora_adapter and
/v1/chat/completions. A loaded adapter answers each SQL question with its gold query; the base,
with a wrong one; an unknown model name is a 404, as on vLLM.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from experience_bank.errors import BadInput

SUITE = "sql/target"


class FakeVLLM:
    """The state of the server: its base model, loaded adapters, every call, and what to refuse."""

    def __init__(self, base: str, gold: dict[str, str]):
        self.base, self.gold = base, gold
        self.loaded: dict[str, str] = {}
        self.calls: list[tuple[str, dict]] = []
        self.refuse_load: tuple[int, dict] | None = None
        self.lora_routes = True
        self.fail_chat = False


def _handler(state: FakeVLLM):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet test output
            pass

        def _reply(self, status: int, doc) -> None:
            body = (doc if isinstance(doc, str) else json.dumps(doc)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            state.calls.append(("GET " + self.path, {}))
            if self.path != "/v1/models":
                return self._reply(404, {"detail": "Not Found"})
            models = [{"id": state.base, "object": "model", "root": state.base, "parent": None}]
            models += [{"id": n, "object": "model", "root": p, "parent": state.base} for n, p in state.loaded.items()]
            self._reply(200, {"object": "list", "data": models})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.calls.append(("POST " + self.path, body))
            if self.path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter") and not state.lora_routes:
                return self._reply(404, {"detail": "Not Found"})
            if self.path == "/v1/load_lora_adapter":
                if state.refuse_load:
                    return self._reply(*state.refuse_load)
                if body["lora_name"] in state.loaded:
                    return self._reply(400, {"error": {"message": f"The lora adapter '{body['lora_name']}' has "
                                                                  "already been loaded.", "code": 400}})
                state.loaded[body["lora_name"]] = body["lora_path"]
                return self._reply(200, f"Success: LoRA adapter '{body['lora_name']}' added successfully.")
            if self.path == "/v1/unload_lora_adapter":
                if state.loaded.pop(body["lora_name"], None) is None:
                    return self._reply(404, {"error": {"message": "cannot be found", "code": 404}})
                return self._reply(200, "Success")
            if self.path == "/v1/chat/completions":
                model = body["model"]
                if model != state.base and model not in state.loaded:
                    return self._reply(404, {"error": {"message": f"The model `{model}` does not exist.",
                                                       "type": "NotFoundError", "code": 404}})
                if state.fail_chat:
                    return self._reply(400, {"error": {"message": "engine fell over", "code": 400}})
                question = body["messages"][-1]["content"]
                answer = state.gold[question] if model in state.loaded else "SELECT 0"
                return self._reply(200, {"id": "c", "object": "chat.completion", "created": 0, "model": model,
                                         "choices": [{"index": 0, "finish_reason": "stop",
                                                      "message": {"role": "assistant", "content": answer}}]})
            self._reply(404, {"detail": "Not Found"})

    return Handler


def _weights(folder: Path, value: float, name: str = "model.safetensors") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    save_file({"w": np.full((4,), value, dtype=np.float32)}, str(folder / name))


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A base folder the server serves, a LoRA child of it (merged weights + adapter/, as trainers
    publish one), the items, and the running server."""
    from evaluators import tasks

    base, child = tmp_path / "base", tmp_path / "child"
    _weights(base, 0.0)
    _weights(child, 1.0)
    (child / "adapter").mkdir()
    (child / "adapter" / "adapter_config.json").write_text(json.dumps(
        {"base_model_name_or_path": str(base), "peft_type": "LORA", "r": 8, "lora_alpha": 16}))
    save_file({"lora_A": np.ones((2, 2), dtype=np.float32)}, str(child / "adapter" / "adapter_model.safetensors"))
    items = tasks.items(SUITE, "validation", 0, n=3)
    state = FakeVLLM(str(base), {x["messages"][-1]["content"]: x["reference"]["sql"] for x in items})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    yield {"base": base, "child": child, "items": items, "state": state, "tmp": tmp_path}
    server.shutdown()
    server.server_close()


def _evaluate(w, model_dir, adapter_dir=None, out="out"):
    from evaluators import evaluate

    return evaluate(str(model_dir), [SUITE], "validation", out_dir=w["tmp"] / out, backend="openai", n=3,
                    items={SUITE: w["items"]}, adapter_dir=None if adapter_dir is None else str(adapter_dir))


def _routes(state) -> list[str]:
    return [c for c, _ in state.calls]


def test_a_lora_child_is_loaded_evaluated_by_its_name_and_unloaded(world):
    from evaluators.models import weights_sha256
    from trainers.checkpoint import adapter_of

    state, child = world["state"], world["child"]
    assert adapter_of(child) == str(child / "adapter") and adapter_of(world["base"]) is None
    result = _evaluate(world, child, adapter_of(child))[SUITE]
    sha = weights_sha256(child)
    name = f"child-{sha[:24]}"
    posts = [(c, b) for c, b in state.calls if c.startswith("POST")]
    assert posts[0] == ("POST /v1/load_lora_adapter", {"lora_name": name, "lora_path": str((child / "adapter").resolve())})
    assert posts[-1] == ("POST /v1/unload_lora_adapter", {"lora_name": name})
    chats = [b["model"] for c, b in posts if c == "POST /v1/chat/completions"]
    assert chats == [name] * 3 and state.loaded == {}
    # the adapter answered (gold SQL): 3 of 3; the identity names the child's weights, not a name
    assert result.metrics["exec_acc"] == 100.0 and result.identity.model_sha256 == sha
    assert result.identity.backend == "openai"


def test_the_adapter_is_unloaded_when_the_evaluation_fails(world):
    import openai

    state = world["state"]
    state.fail_chat = True
    with pytest.raises(openai.BadRequestError):
        _evaluate(world, world["child"], world["child"] / "adapter")
    assert _routes(state).count("POST /v1/load_lora_adapter") == 1
    assert _routes(state)[-1] == "POST /v1/unload_lora_adapter" and state.loaded == {}


def test_the_served_base_is_asked_by_its_name_and_a_full_weights_child_is_refused(world, tmp_path):
    state = world["state"]
    result = _evaluate(world, world["base"])[SUITE]  # served as itself: nothing to load
    assert {b["model"] for c, b in state.calls if c == "POST /v1/chat/completions"} == {str(world["base"])}
    assert "POST /v1/load_lora_adapter" not in _routes(state) and result.metrics["exec_acc"] == 0.0
    full = tmp_path / "full-child"
    _weights(full, 2.0)
    with pytest.raises(BadInput) as err:
        _evaluate(world, full)
    line = str(err.value)
    assert "\n" not in line and f"{full} is a full-weights model, not a LoRA adapter" in line
    assert "serve it as its own model" in line and "POST /v1/load_lora_adapter" not in _routes(state)


@pytest.mark.parametrize("refusal, says", [
    ((400, {"error": {"message": "LoRA is not enabled. Use --enable-lora to enable LoRA.", "code": 400}}),
     "refused to load adapter"),
    (None, "has no load_lora_adapter route (HTTP 404)"),
])
def test_a_refused_load_is_one_line_naming_the_server_and_the_fix(world, refusal, says):
    state = world["state"]
    state.refuse_load, state.lora_routes = refusal, refusal is not None
    with pytest.raises(BadInput) as err:
        _evaluate(world, world["child"], world["child"] / "adapter")
    line = str(err.value)
    url = f"http://127.0.0.1:{_port(world)}/v1"
    assert "\n" not in line and says in line and url in line and "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in line
    assert "--enable-lora" in line
    assert "POST /v1/chat/completions" not in _routes(state)  # nothing generated


def _port(world) -> str:
    import os

    return os.environ["OPENAI_BASE_URL"].rsplit(":", 1)[1].split("/")[0]


def test_an_adapter_of_a_model_the_server_does_not_serve_is_refused(world):
    cfg = world["child"] / "adapter" / "adapter_config.json"
    cfg.write_text(json.dumps({"base_model_name_or_path": "/runs/ep/parent", "peft_type": "LORA", "r": 8}))
    with pytest.raises(BadInput, match=r"trained on /runs/ep/parent, which the server at http://127\.0\.0\.1:\d+/v1 "
                                       "does not serve"):
        _evaluate(world, world["child"], world["child"] / "adapter")
    assert "POST /v1/load_lora_adapter" not in _routes(world["state"])


def test_an_unreachable_server_is_one_line_and_agent_run_writes_nothing(tmp_path, monkeypatch, capsys):
    import socket

    from agent.cli.main import main

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.chdir(tmp_path)
    config = Path(__file__).resolve().parents[1] / "runs" / "test.yaml"
    text = config.read_text() + "backend: openai\n"
    (tmp_path / "served.yaml").write_text(text)
    assert main(["run", "--config", "served.yaml", "--bank", "bank.sqlite", "--out", "runs/ep", "--quiet",
                 "--no-tracking"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"server at http://127.0.0.1:{port}/v1 cannot be reached" in err[0], err
    assert "vllm serve BASE --enable-lora" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served.yaml"]


def test_the_loop_evaluates_a_lora_child_through_the_server(world):
    """The card runner (the loop's, the seed bank's) hands the child's kept adapter to the served evaluation."""
    from agent.world.embedded import ensure_world
    from agent.world.runner import CardRunner

    runner = CardRunner(ensure_world("test"), cache=None, backend="openai")
    world["state"].gold.update({x["messages"][-1]["content"]: x["reference"]["sql"]
                                for x in runner.world.items(SUITE, "validation", 3)})
    result = runner.evaluate(str(world["child"]), (SUITE,), "validation", out_dir=str(world["tmp"] / "loop"), n=3)
    assert result[SUITE].metrics["exec_acc"] == 100.0
    assert [c for c in _routes(world["state"]) if "lora" in c] == ["POST /v1/load_lora_adapter",
                                                                     "POST /v1/unload_lora_adapter"]


def test_agent_eval_of_a_lora_child_goes_through_its_adapter(world, capsys):
    from agent.cli.main import main

    assert main(["eval", "--model", str(world["child"]), "--suite", SUITE, "--split", "validation", "--n", "3",
                 "--backend", "openai", "--json", "--out", str(world["tmp"] / "cli")]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["exec_acc"] == 100.0
    assert [c for c in _routes(world["state"]) if "lora" in c] == ["POST /v1/load_lora_adapter",
                                                                     "POST /v1/unload_lora_adapter"]


def test_an_adapter_already_loaded_under_the_childs_name_is_used_and_left_loaded(world):
    from evaluators.models import weights_sha256

    state, child = world["state"], world["child"]
    name = f"child-{weights_sha256(child)[:24]}"
    state.loaded[name] = str(child / "adapter")  # another evaluation of the same child holds it
    result = _evaluate(world, child, child / "adapter")[SUITE]
    assert result.metrics["exec_acc"] == 100.0 and state.loaded == {name: str(child / "adapter")}
    assert "POST /v1/unload_lora_adapter" not in _routes(state)


def test_a_child_the_server_serves_as_itself_is_asked_for_by_its_path(world):
    state, child = world["state"], world["child"]
    state.base = str(child)  # `vllm serve CHILD`: no adapter to load
    _evaluate(world, child, child / "adapter")
    assert {b["model"] for c, b in state.calls if c == "POST /v1/chat/completions"} == {str(child)}
    assert not [c for c in _routes(state) if "lora" in c]
