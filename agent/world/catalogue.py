"""The embedded world's candidate catalogue: 24 atomic updates, 8 per family, 4 SFT + 4 GRPO.

A practitioner's menu, written down before any outcome was seen and frozen: standard SFT on
the target, SFT with Task-Bank Self-Replay, evidence-augmented / schema-linked / chain-of-
thought / randomly sampled data, LoRA low-rank variants, aggressive learning rates, and GRPO
with execution, AST-match, numeric-match and format rewards. Nothing here is tuned to favour
a policy: the table is hashed (`catalogue_sha256`) and a change to it is a new catalogue.

Budgets: `steps` are sized for the CPU world (scaled per world size by `STEP_SCALE`);
`device_hours` are at a paper-like scale (2-6 per full run) so that `--episode-budget 36gpuh`
binds after a handful of runs. `nu`: `continue` when a 20% trial is a prefix of the full
run; `restart` when the trial is an independent short run (LoRA adapters, replay data
regenerated per run); `none` when a 20% prefix is all warm-up and shows nothing faithful.

Applicability conditions are data (docs/AUTHORIZER.md §2): the five required values plus named hard
conflicts over the current context (`Conflict(field, op, value)`). They are built from a
card's declared `Needs` by one function, `applicability`, for the catalogue's cards (needs
from the table) and for LLM proposals (needs declared in the proposal) alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash
from experience_bank.cards import Adapter, CandidateCard, DataMix, DataRecipe, DatasetRef, HyperParams, NominalBudget
from experience_bank.frozen import Ident, Sha256
from experience_bank.records import Applicability, Conflict

if TYPE_CHECKING:
    from agent.world.interface import WorldData as World

STEP_SCALE = {"test": 0.25, "default": 1.0, "smol": 0.25}
"""Per-size scale of the nominal steps of the embedded worlds (device_hours are not scaled: they are
the cost model); a local world takes its own from its config (`step_scale`)."""

OUTPUT_PROTOCOL = {"finance": "answer-scale", "sql": "sql", "function": "json-call"}
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
REPLAY_ENTRIES = ("ifeval", "captrack")
SFT_BATCH, GRPO_GENERATIONS = 16, 8
# Catalogue v4 (issue 26): what a practitioner would write, chosen before any v4 outcome was seen.
# - Full-parameter SFT at 1e-4, a twentieth of the world's pretraining peak (2e-3): the self-
#   replay seed's learning-rate sweep shows forgetting growing with the learning rate, and v3's
#   5e-4 (a quarter of the peak) cost every full SFT run 3-12 pp of IFEval. LoRA SFT at ten times
#   that (1e-3), the usual LoRA-to-full ratio. The "aggressive" cards keep their own rates.
# - GRPO with TRL's default 8 generations (v3: 4) and 64 steps (v3: 32): v3's GRPO runs moved
#   their targets by one to four items, within the noise.
SFT_LR, LORA_SFT_LR, GRPO_STEPS = 1e-4, 1e-3, 64
# Catalogue v6 (issue 26; docs/results/grpo-filter-v6-pilot.md, worlds-v6.md), chosen before any v6 outcome:
# - GRPO at a tenth of its adapter kind's SFT rate (full 1e-5, LoRA 1e-4), the field's RL-to-SFT ratio
#   (a tenth to a twentieth): at v4's 1e-4 the finance GRPO cards lost their own target on both pilot
#   seeds (G01 -2.2 pp) with two thirds of their groups silent. The aggressive card (G03) keeps its rate.
# - Every GRPO card trains on prompts whose group, sampled from the frozen parent, gets rewards that
#   differ (DAPO's dynamic sampling, offline: PROMPT_FILTER). v5's GRPO runs saw 30-94 % of their groups
#   with equal rewards, i.e. no gradient; the filter halved that in the pilot.
GRPO_LR, LORA_GRPO_LR = SFT_LR / 10, LORA_SFT_LR / 10
# Catalogue v7 (issue 26, item 3; docs/results/worlds-v6.md, "A pilot for catalogue v7"): on both v6p
# worlds the only harmful cell was S12, the one card with an aggressive SFT recipe. Every family now has
# the aggressive recipe of at least one method (S12's for SFT, G03's for GRPO): S02 and S06 take S12's on
# their family's standard rows, G08 takes G03's with G05's reward. Each replaced card's lever is still
# carried by another card (self-replay: S08, S11; the evidence rows: G07; LoRA GRPO: G04, G12); S04
# stays, the LoRA card the local-model path runs (docs/own-model.md).
PROMPT_FILTER = "reward_spread"
COMPLETION_TOKENS = {"finance": 24, "sql": 64, "function": 64}

# --- the frozen table ---------------------------------------------------------------------
# Columns: id, family, method, title, mix {dataset: weight}, knobs.
# knobs: lr, steps, gpuh, nu, and optionally replay, lora (rank), warmup, sched, rewards,
# beta, temp, stage_max (conflict "stage gt N"), template (conflict on the chat template).

_SPEC: tuple[tuple, ...] = (
    # finance: FinQA-like -> TAT-QA-like
    ("S01", "finance", "sft", "Standard TAT-QA-style SFT", {"finance/target/train": 1.0},
     dict(lr=SFT_LR, steps=120, gpuh=3.0, nu="continue")),
    ("S02", "finance", "sft", "Aggressive-LR TAT-QA-style SFT (long warm-up)", {"finance/target/train": 1.0},
     dict(lr=3e-3, steps=120, gpuh=3.0, nu="none", warmup=0.3, sched="constant", stage_max=0)),
    ("S03", "finance", "sft", "Chain-of-thought-augmented finance SFT", {"finance/target-cot/train": 0.7, "finance/target/train": 0.3},
     dict(lr=SFT_LR, steps=120, gpuh=4.0, nu="continue")),
    ("S04", "finance", "sft", "LoRA r=8 finance SFT", {"finance/target/train": 1.0},
     dict(lr=LORA_SFT_LR, steps=120, gpuh=2.0, nu="restart", lora=8, stage_max=1)),
    ("G01", "finance", "grpo", "Numeric-match GRPO on TAT-QA-style questions", {"finance/target/train": 1.0},
     dict(lr=GRPO_LR, steps=GRPO_STEPS, gpuh=5.0, nu="continue", rewards=("numeric_match",), beta=0.0, temp=1.0)),
    ("G02", "finance", "grpo", "Numeric-match + format GRPO", {"finance/target/train": 1.0},
     dict(lr=GRPO_LR, steps=GRPO_STEPS, gpuh=5.0, nu="continue", rewards=("numeric_match", "format"), beta=0.04, temp=1.0,
          template=True)),
    ("G03", "finance", "grpo", "Aggressive numeric-match GRPO (long warm-up, no KL)", {"finance/target/train": 1.0},
     dict(lr=5e-4, steps=GRPO_STEPS, gpuh=5.5, nu="none", rewards=("numeric_match",), beta=0.0, temp=1.2, warmup=0.3)),
    ("G04", "finance", "grpo", "Format-only GRPO, LoRA r=16", {"finance/target/train": 1.0},
     dict(lr=LORA_GRPO_LR, steps=GRPO_STEPS, gpuh=3.0, nu="restart", rewards=("format",), beta=0.0, temp=1.0, lora=16,
          stage_max=0, template=True)),
    # sql: Spider-like -> BIRD-like
    ("S05", "sql", "sft", "Standard BIRD-style SFT", {"sql/target/train": 1.0},
     dict(lr=SFT_LR, steps=120, gpuh=3.0, nu="continue")),
    ("S06", "sql", "sft", "Aggressive-LR BIRD-style SFT (long warm-up)", {"sql/target/train": 1.0},
     dict(lr=3e-3, steps=120, gpuh=3.0, nu="none", warmup=0.3, sched="constant", stage_max=0)),
    ("S07", "sql", "sft", "Schema-linked SQL SFT", {"sql/target-schema/train": 0.6, "sql/target/train": 0.4},
     dict(lr=SFT_LR, steps=120, gpuh=3.5, nu="continue", stage_max=1)),
    ("S08", "sql", "sft", "LoRA r=16 SQL SFT with self-replay", {"sql/target/train": 1.0},
     dict(lr=LORA_SFT_LR, steps=120, gpuh=2.5, nu="restart", lora=16, replay=0.2)),
    ("G05", "sql", "grpo", "Execution-reward GRPO", {"sql/target/train": 1.0},
     dict(lr=GRPO_LR, steps=GRPO_STEPS, gpuh=6.0, nu="continue", rewards=("execution",), beta=0.04, temp=1.0)),
    ("G06", "sql", "grpo", "Execution + format GRPO", {"sql/target/train": 1.0},
     dict(lr=GRPO_LR, steps=GRPO_STEPS, gpuh=6.0, nu="continue", rewards=("execution", "format"), beta=0.04, temp=1.0,
          template=True)),
    ("G07", "sql", "grpo", "Execution-reward GRPO on evidence prompts", {"sql/target-evidence/train": 1.0},
     dict(lr=GRPO_LR, steps=GRPO_STEPS, gpuh=6.0, nu="continue", rewards=("execution",), beta=0.0, temp=1.0)),
    ("G08", "sql", "grpo", "Aggressive execution-reward GRPO (long warm-up, no KL)", {"sql/target/train": 1.0},
     dict(lr=5e-4, steps=GRPO_STEPS, gpuh=6.0, nu="none", rewards=("execution",), beta=0.0, temp=1.2, warmup=0.3)),
    # function calling: xLAM-like -> BFCL-like
    ("S09", "function", "sft", "Standard BFCL-style function-call SFT", {"function/target/train": 1.0},
     dict(lr=SFT_LR, steps=120, gpuh=3.0, nu="continue")),
    ("S10", "function", "sft", "Randomly sampled function-call SFT", {"function/target-random/train": 1.0},
     dict(lr=SFT_LR, steps=120, gpuh=3.0, nu="continue")),
    ("S11", "function", "sft", "Function-call SFT with task-bank self-replay", {"function/target/train": 1.0},
     dict(lr=SFT_LR, steps=120, gpuh=3.5, nu="restart", replay=0.25)),
    ("S12", "function", "sft", "Aggressive-LR function-call SFT (long warm-up)", {"function/target/train": 1.0},
     dict(lr=3e-3, steps=120, gpuh=3.0, nu="none", warmup=0.3, sched="constant", stage_max=0)),
    ("G09", "function", "grpo", "AST-match GRPO", {"function/target/train": 1.0},
     dict(lr=GRPO_LR, steps=GRPO_STEPS, gpuh=5.0, nu="continue", rewards=("ast_match",), beta=0.04, temp=1.0)),
    ("G10", "function", "grpo", "AST-match + format GRPO", {"function/target/train": 1.0},
     dict(lr=GRPO_LR, steps=GRPO_STEPS, gpuh=5.0, nu="continue", rewards=("ast_match", "format"), beta=0.04, temp=1.0,
          template=True)),
    ("G11", "function", "grpo", "Format-only GRPO (JSON validity)", {"function/target/train": 1.0},
     dict(lr=GRPO_LR, steps=GRPO_STEPS, gpuh=4.0, nu="continue", rewards=("format",), beta=0.0, temp=1.0, template=True)),
    ("G12", "function", "grpo", "AST-match GRPO on random samples, LoRA r=8", {"function/target-random/train": 1.0},
     dict(lr=LORA_GRPO_LR, steps=GRPO_STEPS, gpuh=3.5, nu="restart", rewards=("ast_match",), beta=0.0, temp=1.0, lora=8)),
)


REFERENCE_CARDS = {"sft": "S01", "grpo": "G05"}
"""The standard card of each method: its recipe is the one a matched control trains with."""


def reference_recipe(method: str) -> dict:
    """The training recipe of a method's standard card (REFERENCE_CARDS): learning rate, schedule,
    warm-up and, for GRPO, the KL weight and temperature. The matched controls (agent/world/controls.py)
    take it from here, so a change of the catalogue's rates changes its controls with it (v4 lowered
    S01 to 1e-4 while the controls kept v3's 5e-4: the control was then the larger update)."""
    k = next(row[5] for row in _SPEC if row[0] == REFERENCE_CARDS[method])
    recipe = {"learning_rate": k["lr"], "lr_scheduler": k.get("sched", "cosine"), "warmup_ratio": k.get("warmup", 0.05)}
    return recipe | ({"beta": k["beta"], "temperature": k["temp"]} if method == "grpo" else {})


def catalogue_sha256() -> str:
    """Hash of the frozen table (independent of any world's dataset hashes)."""
    constants = {"version": 7, "prompt_filter": PROMPT_FILTER, "step_scale": STEP_SCALE, "protocols": OUTPUT_PROTOCOL, "lora_targets": LORA_TARGETS,
                 "replay": REPLAY_ENTRIES, "sft_batch": SFT_BATCH, "generations": GRPO_GENERATIONS,
                 "completion_tokens": COMPLETION_TOKENS}
    return content_hash({"table": [list(row) for row in _SPEC], "constants": constants})


def card_ids() -> tuple[str, ...]:
    return tuple(row[0] for row in _SPEC)


def catalogue(world: "World") -> tuple[CandidateCard, ...]:
    """The 24 cards, bound to this world's dataset hashes and step scale."""
    return tuple(_card(row, world) for row in _SPEC)


def adapter_kinds() -> dict[str, str]:
    """Card id -> adapter kind (`full` or `lora`) of the frozen table: no world needed, so a ledger
    whose catalogue_sha256 is this table's can name its cards' adapters."""
    return {row[0]: _adapter_kind(row[5]) for row in _SPEC}


def _adapter_kind(knobs: dict) -> str:
    return "lora" if "lora" in knobs else "full"


def card_by_id(world: "World", card_id: str) -> CandidateCard:
    return {c.id: c for c in catalogue(world)}[card_id]


def _dataset(world: "World", ds: str) -> DatasetRef:
    if ds not in world.datasets:
        raise KeyError(f"world {world.size} has no dataset {ds!r} (catalogue and evaluators disagree)")
    return DatasetRef(id=ds, sha256=world.datasets[ds])


def _card(row: tuple, world: "World") -> CandidateCard:
    cid, family, method, title, mix, k = row
    steps = max(4, round(k["steps"] * world.step_scale))
    grpo = method == "grpo"
    batch = (4 * GRPO_GENERATIONS) if grpo else SFT_BATCH
    replay = k.get("replay", 0.0)
    data = DataRecipe(
        mix=tuple(DataMix(dataset=_dataset(world, ds), weight=w) for ds, w in mix.items()),
        n_examples=steps * (batch // GRPO_GENERATIONS if grpo else batch),
        replay_share=replay, replay_entries=REPLAY_ENTRIES if replay else (),
        prompt_filter=PROMPT_FILTER if grpo else None,
    )
    hp = HyperParams(
        learning_rate=k["lr"], batch_size=batch, lr_scheduler=k.get("sched", "cosine"),
        warmup_ratio=k.get("warmup", 0.05), max_length=512,
        num_generations=GRPO_GENERATIONS if grpo else None,
        max_completion_length=COMPLETION_TOKENS[family] if grpo else None,
        beta=k.get("beta") if grpo else None, temperature=k.get("temp") if grpo else None,
        rewards=k.get("rewards", ()),
    )
    adapter = (Adapter(kind="lora", rank=k["lora"], alpha=2 * k["lora"], targets=LORA_TARGETS)
               if _adapter_kind(k) == "lora" else Adapter(kind="full"))
    return CandidateCard(id=cid, title=title, method=method, family=family, data=data, hparams=hp,
                         adapter=adapter, budget=NominalBudget(steps=steps, device_hours=k["gpuh"]), nu=k["nu"])


def runtime_of(card: CandidateCard) -> str:
    """The runtime a card needs: LoRA cards need peft on top of their TRL trainer."""
    if card.adapter.kind == "lora":
        return "peft-lora"
    return "trl-grpo" if card.method == "grpo" else "trl-sft"


class Needs(BaseModel):
    """What a card declares it needs of the context: the parts of B_i the card itself does not fix.

    The catalogue's needs come from its frozen table (`catalogue_needs`); an LLM proposal
    declares its own, validated strictly, and `check_needs` refuses a declaration that
    contradicts the card. Whether the current context meets them is the authorizer's question
    (each need becomes a field score or a named hard conflict in B_i), not this module's."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    datasets: tuple[Ident, ...] = Field(min_length=1, max_length=8)
    """Ids of the training datasets, exactly the card's data mix."""
    runtime: Ident
    """Trainer runtime, exactly the one the card's method and adapter need (`runtime_of`)."""
    output_protocol: Ident
    """Output protocol the update trains for, e.g. `json-call`."""
    max_stage: Annotated[int, Field(ge=0, le=1000)] | None = None
    """Latest parent stage (number of promotions) the update is meant for; None: any."""
    chat_template_sha256: Sha256 | None = None
    """Chat template the update assumes; None: any."""
    conflicts: tuple[Conflict, ...] = Field(default=(), max_length=8)
    """Further named hard conflicts, beyond those the needs above imply."""


def catalogue_needs(card: CandidateCard, world: "World") -> Needs:
    """The needs the frozen table records for one of its cards."""
    knobs = {row[0]: row[5] for row in _SPEC}.get(card.id)
    if knobs is None:
        raise BadInput(f"card {card.id} is not in the catalogue: a proposal must declare its own needs")
    return Needs(datasets=tuple(m.dataset.id for m in card.data.mix), runtime=runtime_of(card),
                 output_protocol=OUTPUT_PROTOCOL[card.family], max_stage=knobs.get("stage_max"),
                 chat_template_sha256=world.chat_template_sha256 if knobs.get("template") else None)


def check_needs(card: CandidateCard, needs: Needs) -> None:
    """BadInput where declared needs contradict the card they are declared for."""
    mix = sorted(m.dataset.id for m in card.data.mix)
    if sorted(needs.datasets) != mix:
        raise BadInput(f"card {card.id} declares datasets {sorted(needs.datasets)} but trains on {mix}")
    if needs.runtime != runtime_of(card):
        raise BadInput(f"card {card.id} declares runtime {needs.runtime} but its method and adapter need "
                       f"{runtime_of(card)}")


def applicability(card: CandidateCard, world: "World", needs: Needs | None = None) -> Applicability:
    """B_i: the five required values and the named hard conflicts, as data, from the card's needs
    (the catalogue's own when none are given)."""
    if needs is None:
        needs = catalogue_needs(card, world)
    check_needs(card, needs)
    return Applicability(
        family=card.family, datasets=tuple(m.dataset for m in card.data.mix), runtime=needs.runtime,
        parent_arch=world.model.arch, chat_template_sha256=needs.chat_template_sha256, max_stage=needs.max_stage,
        output_protocol=needs.output_protocol, conflicts=_conflicts(card, needs))


def _conflicts(card: CandidateCard, needs: Needs) -> tuple[Conflict, ...]:
    """The hard conflicts each need implies, then the declared ones."""
    protocol = needs.output_protocol
    out = [Conflict(name=f"requires output protocol {protocol}", field="output_protocol", op="ne", value=protocol)]
    for ref in card.data.mix:
        if not ref.dataset.id.endswith("/target/train"):  # a non-standard pool the context may lack
            out.append(Conflict(name=f"needs dataset {ref.dataset.id}", field="datasets", op="not_contains",
                                value=ref.dataset.id))
    if needs.runtime == "peft-lora":
        out.append(Conflict(name="requires runtime peft-lora", field="runtimes", op="not_contains", value="peft-lora"))
    if needs.max_stage is not None:
        out.append(Conflict(name=f"conflicts with a later-stage parent (stage > {needs.max_stage})", field="stage",
                            op="gt", value=needs.max_stage))
    template = needs.chat_template_sha256
    if template:
        out.append(Conflict(name=f"conflicts: parent chat template != {template[:12]}",
                            field="parent.chat_template_sha256", op="ne", value=template))
    return tuple(out) + needs.conflicts
