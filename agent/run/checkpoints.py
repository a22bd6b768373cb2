"""runs/ID/checkpoints.sqlite: LangGraph's checkpoints of one episode, and what they record.

The graph runs under LangGraph's SQLite checkpointer with a JSON-only serializer: no pickle
fallback and no msgpack object revival, so a checkpoint is data, never code (the state holds
only ids and numbers: agent/loop/state.py).
"""

from __future__ import annotations

from datetime import datetime

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from experience_bank.files import read_only


def strict_serde() -> JsonPlusSerializer:
    """A serializer that never unpickles and revives no Python objects (the state is plain JSON)."""
    return JsonPlusSerializer(pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=None)


def checkpoint_marks(path, episode_id: str) -> list[tuple[str, float]]:
    """(node that ran after the checkpoint, checkpoint timestamp) from an episode's LangGraph
    checkpoint file, in checkpoint order; read-only, so a live episode can read its own."""
    serde = strict_serde()
    conn = read_only(path)
    try:
        node_of: dict[str, str] = {}
        for cid, task_path in conn.execute("SELECT checkpoint_id, task_path FROM writes WHERE thread_id = ?",
                                           [episode_id]):
            node_of.setdefault(cid, task_path.split(", ")[-1])
        marks = []
        for cid, kind, blob in conn.execute("SELECT checkpoint_id, type, checkpoint FROM checkpoints "
                                            "WHERE thread_id = ? ORDER BY checkpoint_id", [episode_id]):
            ts = serde.loads_typed((kind, blob))["ts"]
            marks.append((node_of.get(cid, "(end)"), datetime.fromisoformat(ts).timestamp()))
        return marks
    finally:
        conn.close()
