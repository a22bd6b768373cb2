"""The control loop as a LangGraph flowchart (docs/ARCHITECTURE.md, "One step of the loop")."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from agent.loop import nodes
from agent.loop.state import Ctx, State


def build_graph(checkpointer=None):
    """propose -> filter -> [select -> authorize -> (validate) -> (train -> gate) -> commit]* -> endpoint -> consolidate -> report."""
    g = StateGraph(State, context_schema=Ctx)

    # Candidates: the library's catalogue plus at most q LLM proposals, then the executability filter.
    g.add_node("propose", nodes.propose)
    g.add_node("filter", nodes.filter_candidates)
    g.add_edge(START, "propose")
    g.add_edge("propose", "filter")
    g.add_edge("filter", "select")

    # One candidate: pick it (or stop), authorize it, and run only what the decision allows.
    g.add_node("select", nodes.select)
    g.add_node("authorize", nodes.authorize)
    g.add_node("validate", nodes.validate)
    g.add_node("train", nodes.train)
    g.add_node("gate", nodes.gate)
    g.add_node("commit", nodes.commit)
    g.add_conditional_edges("select", nodes.after_select, ["authorize", "endpoint"])
    g.add_conditional_edges("authorize", nodes.after_authorize, ["validate", "train", "commit"])
    g.add_conditional_edges("validate", nodes.after_validate, ["train", "commit"])
    g.add_conditional_edges("train", nodes.after_train, ["gate", "commit"])
    g.add_edge("gate", "commit")
    g.add_edge("commit", "select")

    # End of the episode: the final parent on the held-out test split, a new frozen library
    # version, then the report.
    g.add_node("endpoint", nodes.endpoint)
    g.add_node("consolidate", nodes.consolidate)
    g.add_edge("endpoint", "consolidate")
    g.add_node("report", nodes.report)
    g.add_edge("consolidate", "report")
    g.add_edge("report", END)
    return g.compile(checkpointer=checkpointer)
