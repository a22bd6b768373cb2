"""When things happen: the LangGraph flowchart, its nodes and state, and the episode around them.

graph     the flowchart (docs/ARCHITECTURE.md, "One step of the loop")
nodes     small State -> partial State functions; each rule has its owner elsewhere
state     the checkpointed State, the runtime Ctx and the Ports protocol the nodes call
ports     the real Ports: thin adapters that read the frozen manifest
episode   composition: check inputs, freeze the manifest, run or resume the graph
proposer  LLM proposals (OpenAI-compatible), frozen in the run directory
"""
