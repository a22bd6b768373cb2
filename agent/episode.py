"""The composition of one episode: validate the inputs, freeze the manifest, run or resume the graph.

Order matters: every input is checked (config, budget, world/model, bank schema, proposer
settings) before the run directory is created, so bad input writes nothing. The manifest is
frozen and hashed before the first node. The graph runs under LangGraph's SQLite
checkpointer (`runs/ID/checkpoints.sqlite`) with durability="sync" and a JSON-only
serializer (no pickle fallback, no msgpack object revival; reliability §A4), so
`agent run --resume ID` continues at the node that was running when the process died.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from agent.graph import build_graph
from agent.state import Ctx

RECURSION_LIMIT = 100_000
"""Supersteps: about five per candidate, so any catalogue fits."""


def strict_serde() -> JsonPlusSerializer:
    """A serializer that never unpickles and revives no Python objects (the state is plain JSON)."""
    return JsonPlusSerializer(pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=None)


def drive(ctx: Ctx, initial: dict[str, Any], checkpoints: Path) -> dict[str, Any]:
    """Run the graph to its end, or resume it from its last checkpoint; return the final state."""
    conn = sqlite3.connect(str(checkpoints), check_same_thread=False)
    try:
        graph = build_graph(SqliteSaver(conn, serde=strict_serde()))
        config = {"configurable": {"thread_id": ctx.episode_id}, "recursion_limit": RECURSION_LIMIT}
        snapshot = graph.get_state(config)
        if snapshot.values and not snapshot.next:
            return dict(snapshot.values)  # finished already
        start = None if snapshot.values else initial
        for chunk in graph.stream(start, config, context=ctx, durability="sync", stream_mode="updates"):
            for node, update in chunk.items():
                ctx.progress(node, update or {})
        return dict(graph.get_state(config).values)
    finally:
        conn.close()
