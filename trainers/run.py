"""The one training entry point: `train(card, parent_dir, examples, ...) -> TrainResult`.

One code path for every run: SFT or GRPO (TRL), full weights or LoRA (peft), a full run or
a trial prefix, single process or under `accelerate launch` (runs/accelerate_zero2.yaml).

How a run is laid out in time. The LR schedule always spans the card's nominal step count
when the card's trial is a prefix of its full run (nu = continue); a trial (fraction < 1)
stops early at trainers.steps' share of the steps (the floor: never more than the fraction
the budget charges) and keeps its Trainer checkpoint, so continuing it
reaches exactly the uninterrupted run's steps, schedule and optimizer state. A trial of a
nu = restart card is an independent short run (its own compressed schedule).

Crash safety. Trainer checkpoints land every `save_steps` in `<out_dir>.work/`; a re-run
with the same run_key resumes from the newest complete one before its stop step (one at the
stop step is dropped: resumed there, a trial would train a step past it, `_start_state`). The child is written to a
temporary sibling and renamed to out_dir, so out_dir exists only when complete, and a
re-run with the same run_key returns the published result without training.

Caching. With a `cache` (experience_bank.runcache.RunCache), a run whose content key
(`run_cache_key`: parent weights, card, examples, fraction, seed, continued trial, threads,
launch, trainer code and library versions) is stored is served from it: its files are
copied into out_dir and its result re-anchored there, with this run's run_key.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback, set_seed

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.cards import CandidateCard
from experience_bank.results import Snapshot, TrainResult, check_seed
from trainers import checkpoint as ckpt
from trainers import grpo, sft
from trainers.sanity import run_checks
from trainers.steps import plan_steps

Progress = Callable[[int, int], None]
_SCHEDULERS = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}
_LOG_KEYS = ("loss", "grad_norm", "learning_rate", "mean_token_accuracy", "entropy", "reward", "reward_std",
             "frac_reward_zero_std", "completions/clipped_ratio", "completions/mean_length", "kl")


class _StopAt(TrainerCallback):
    """Ends a trial at its prefix step and saves there (the schedule still spans the full run)."""

    def __init__(self, stop_at: int, progress: Progress | None):
        self.stop_at, self.progress = stop_at, progress

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress(state.global_step, self.stop_at)
        if state.global_step >= self.stop_at:
            control.should_training_stop = True
            control.should_save = True
        return control


class _Snapshots(TrainerCallback):
    """Saves the model at the given steps (a trial's curve) into <work>/curve/step-N, merged when
    LoRA, so each is a model directory the evaluators load. In the work dir, so that a crash
    resume keeps the ones already saved; a step before the resume point is not saved again."""

    def __init__(self, steps: Sequence[int], work: Path, tokenizer):
        self.steps, self.work, self.tokenizer = set(steps), work, tokenizer

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step in self.steps and state.is_world_process_zero:
            dest = snapshot_dir(self.work, state.global_step)
            if not (dest / _SNAPSHOT_DONE).is_file():
                _save_merged(model, self.tokenizer, dest)
        return control


_SNAPSHOT_DONE = "snapshot.complete"


def snapshot_dir(root: Path, step: int) -> Path:
    """Where the snapshot of `step` lives under a work or run directory (the one layout)."""
    return root / "curve" / f"step-{step}"


def _save_merged(model, tokenizer, dest: Path) -> None:
    """A loadable model directory of the model as it is now, written atomically; the training
    model is untouched (a LoRA model is merged in a copy)."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    (tmp / _SNAPSHOT_DONE).touch()  # a crash can cut a snapshot short: only a marked one is used
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def _common_args(card: CandidateCard, work: Path, schedule: int, seed: int) -> dict:
    """TrainingArguments shared by SFT and GRPO (TRL's GPU-oriented defaults turned off on CPU: no bf16, no pinned memory)."""
    h = card.hparams
    cuda = torch.cuda.is_available()
    return dict(
        output_dir=str(work),
        max_steps=schedule,
        learning_rate=h.learning_rate,
        lr_scheduler_type=_SCHEDULERS[h.lr_scheduler],
        warmup_steps=h.warmup_ratio,  # a float in [0, 1) is a ratio of max_steps
        logging_steps=1,
        logging_nan_inf_filter=False,  # the filter hides NaN losses from the sanity check
        save_strategy="steps",
        save_steps=max(1, math.ceil(schedule / 10)),
        save_total_limit=2,
        seed=seed,
        data_seed=seed,
        use_cpu=not cuda,
        bf16=cuda and torch.cuda.is_bf16_supported(),  # fp32 on CPU: reproducible, and tiny models are fast anyway
        activation_checkpointing=False,  # ~1.5x slower for small models; memory is not the limit here
        report_to="none",
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        disable_tqdm=True,
    )


def _load(card: CandidateCard, parent_dir: str):
    model = AutoModelForCausalLM.from_pretrained(parent_dir, use_safetensors=True, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(parent_dir)
    if card.adapter.kind == "lora":
        from peft import LoraConfig, get_peft_model

        a = card.adapter
        lora = LoraConfig(r=a.rank, lora_alpha=a.alpha or a.rank, target_modules=list(a.targets),
                          lora_dropout=0.0, task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    return model, tokenizer


def _trainer(card, model, tokenizer, examples, reward_funcs, common, callbacks):
    if card.method == "sft":
        return sft.sft_trainer(model, tokenizer, examples, card, common, callbacks)
    return grpo.grpo_trainer(model, tokenizer, examples, card, grpo.pick_rewards(card, reward_funcs), common, callbacks)


def _validate(card: CandidateCard, parent_dir: str, examples: Sequence[dict], reward_funcs) -> None:
    """Every input check happens before anything is written."""
    if not (Path(parent_dir) / "config.json").is_file():
        raise BadInput(f"parent {parent_dir} has no config.json: pass a model directory saved with save_pretrained")
    ckpt.weight_files(parent_dir)
    if not examples:
        raise BadInput(f"no training examples for card {card.id}: pass its dataset(s) with --data")
    if card.method == "sft":
        sft.check_examples(examples)
    else:
        grpo.check_examples(examples)
        grpo.check_batch(card)
        grpo.pick_rewards(card, reward_funcs)


def _work_dir(out: Path, run_key: str) -> Path:
    """The Trainer's checkpoint dir; refuses one that holds another run's state."""
    work = out.with_name(out.name + ".work")
    marker = work / "run_key"
    if marker.is_file() and marker.read_text() != run_key:
        raise BadInput(f"{work} holds checkpoints of run {marker.read_text()!r}: choose another --out or delete it")
    work.mkdir(parents=True, exist_ok=True)
    marker.write_text(run_key)
    return work


def _start_state(work: Path, resume_from: str | None, schedule: int, stop_at: int) -> tuple[Path | None, bool]:
    """(state to resume, whether it is a trial being continued): the newest own checkpoint
    before the stop step (crash resume) first, else the trial state named by resume_from.

    A checkpoint at the stop step is a finished run that a crash cut short before it was
    published. Resumed from there, a trial would train one step past its prefix: the Trainer
    runs a step before any callback can stop it (its stop is on_step_end). So such checkpoints
    are dropped, and the run re-trains from the one before, at most save_steps steps."""
    for late in work.glob("checkpoint-*"):  # none where work does not exist yet
        if ckpt.checkpoint_step(late) >= stop_at:
            shutil.rmtree(late)
    own = ckpt.last_trainer_checkpoint(work)
    if own is not None or resume_from is None:
        return own, False
    state = ckpt.resolve_state_dir(resume_from)
    prefix = json.loads((state / "trainer_state.json").read_text())
    if prefix["max_steps"] != schedule:
        raise BadInput(f"{resume_from} ran a {prefix['max_steps']}-step schedule, not this run's {schedule}: "
                       "only a nu = continue trial can be continued; restart from the parent")
    return state, True


def _trial_prefix(resume_from: str | None) -> int:
    """Steps the continued trial ran (charged by the trial, not by this run)."""
    if resume_from is None:
        return 0
    state = ckpt.resolve_state_dir(resume_from)
    return int(json.loads((state / "trainer_state.json").read_text())["global_step"])


def _final_log(history: list[dict], method: str, resumed_step: int, prefix: int) -> tuple[dict[str, float], int]:
    """The run's last logged metrics (first loss/reward kept too) and tokens of this run.
    `continued_from_step`: the trial prefix this run continued (the cost model charges the
    rest); `resumed_step`: where this process started (a crash resume counts as this run)."""
    steps = [h for h in history if "step" in h and any(k in h for k in _LOG_KEYS)]
    log: dict[str, float] = {"resumed_step": float(resumed_step), "continued_from_step": float(prefix)}
    for key in _LOG_KEYS:
        values = [float(h[key]) for h in steps if key in h]
        if values and all(math.isfinite(v) for v in values):
            log[key] = values[-1]
            if key in ("loss", "reward"):
                log[f"{key}_first"] = values[0]
    log.update(reward_signal(steps) if method == "grpo" else {})
    tokens = [float(h["num_tokens"]) for h in history if "num_tokens" in h]
    # GRPO counts tokens in the restored TrainerState (cumulative); SFT restarts at 0 on resume.
    prefix = [float(h["num_tokens"]) for h in history if "num_tokens" in h and h.get("step", 0) <= resumed_step]
    offset = prefix[-1] if (method == "grpo" and prefix) else 0.0
    return log, int(tokens[-1] - offset) if tokens else 0


def reward_signal(steps: list[dict], parts: int = 4) -> dict[str, float]:
    """Whether a GRPO run learnt from its reward: the mean reward over the first and the last
    1/parts of its logged steps, and the mean share of groups whose rewards were all equal (no
    gradient; bench/grpo_signal.py reads trials' logs with it, agent/world/examples.
    informative_examples is the cure)."""
    rewards = [float(h["reward"]) for h in steps if "reward" in h and math.isfinite(float(h["reward"]))]
    silent = [float(h["frac_reward_zero_std"]) for h in steps if "frac_reward_zero_std" in h]
    out: dict[str, float] = {}
    if rewards:
        q = max(1, len(rewards) // parts)
        out |= {"reward_early": math.fsum(rewards[:q]) / q, "reward_late": math.fsum(rewards[-q:]) / q}
    if silent and all(math.isfinite(v) for v in silent):
        out["no_signal"] = math.fsum(silent) / len(silent)
    return out


def _save_child(trainer, tokenizer, card: CandidateCard, stage: Path) -> str | None:
    """Write the child (merged when LoRA) and the kept adapter into the staging dir."""
    model = trainer.model
    adapter_dir = None
    if card.adapter.kind == "lora":
        model.save_pretrained(str(stage / ckpt.ADAPTER_DIR))
        adapter_dir = ckpt.ADAPTER_DIR
        model = model.merge_and_unload()
    model.save_pretrained(str(stage))
    tokenizer.save_pretrained(str(stage))
    return adapter_dir


_CODE_FILES = ("trainers", "experience_bank/frozen.py", "experience_bank/cards.py", "experience_bank/records.py",
               "experience_bank/results.py")
"""What the trainer version hashes: this package and the records it reads and writes."""


def code_version(*, rewards: bool) -> str:
    """The trainer's code version in a run's key: this package and the records it reads and
    writes, plus the reward functions' code (evaluators/) for a run that uses them."""
    from experience_bank.runcache import source_version

    return source_version(_CODE_FILES + (("evaluators",) if rewards else ()))


def libraries() -> dict[str, str]:
    import accelerate
    import peft
    import transformers
    import trl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            "peft": peft.__version__, "accelerate": accelerate.__version__}


def run_cache_key(card: CandidateCard, parent_dir: str, examples: Sequence[dict], *, fraction: float,
                  reward_funcs: Mapping[str, Callable] | None, resume_from: str | None, seed: int,
                  threads: int | None, launch, snapshots: Sequence[int] = ()) -> dict:
    """Everything a run's result depends on (the run cache's key; the run key is not in it:
    it names the request, not its content)."""
    from experience_bank.hashing import content_hash

    prefix = None
    if resume_from is not None:
        state = ckpt.resolve_state_dir(resume_from)
        prefix = {"weights": ckpt.weights_sha256(resume_from),
                  "state": content_hash(json.loads((state / "trainer_state.json").read_text()))}
    return {"kind": "train", "card": card.content_hash(), "parent": ckpt.model_identity(parent_dir),
            "examples": content_hash(list(examples)), "fraction": float(fraction), "seed": seed,
            "rewards": sorted(reward_funcs or {}), "prefix": prefix, "snapshots": sorted(snapshots),
            "threads": threads or torch.get_num_threads(),
            "launch": None if launch is None else {k: str(v) for k, v in sorted(vars(launch).items())},
            # a GRPO run's result also depends on its reward functions' code (evaluators/)
            "code": code_version(rewards=bool(reward_funcs)), "libraries": libraries()}


def _served(text: str, out: Path, run_key: str, resume_from: str | None) -> TrainResult:
    """A stored result, re-anchored to the directory it was served into and this request's key.
    Re-derived from the served files first: the entry's value must be its result.json (whose
    bytes the cache checked) and its weights (sealing.Mismatch otherwise: recomputed)."""
    from experience_bank.sealing import Mismatch

    stored = TrainResult.model_validate_json(text)
    if ckpt.read_result(out) != stored:
        raise Mismatch(f"its stored result is not the {ckpt.RESULT_FILE} it was published with")
    adapter = Path(stored.adapter_dir).relative_to(stored.checkpoint) if stored.adapter_dir else None
    result = stored.model_copy(update={"checkpoint": str(out), "adapter_dir": str(out / adapter) if adapter else None,
                                       "run_key": run_key, "resumed_from": str(resume_from) if resume_from else None})
    if ckpt.weights_sha256(out) != result.checkpoint_sha256:
        raise Mismatch("its weights do not match its result's checkpoint_sha256")
    # the served files are hard links into the cache entry: replace the result, never write through it
    write_atomic(out / ckpt.RESULT_FILE, result.model_dump_json(indent=2))
    shutil.rmtree(out.with_name(out.name + ".work"), ignore_errors=True)  # a crashed attempt's checkpoints
    return result


def train(card: CandidateCard, parent_dir: str, examples: Sequence[dict], *, out_dir: str, run_key: str,
          fraction: float = 1.0, reward_funcs: Mapping[str, Callable] | None = None, resume_from: str | None = None,
          seed: int = 0, threads: int | None = None, progress: Progress | None = None,
          launch=None, cache=None, snapshots: Sequence[tuple[float, int]] = ()) -> TrainResult:
    """Run (or resume, or return the finished, or serve the cached) TRL run of `card` from `parent_dir`.

    A failed sanity check does not raise: it is recorded in `result.sanity` (hard failure).
    `launch` (a trainers.launch.LaunchSpec): run it under `accelerate launch` instead, in
    processes that call this function (with their own reward functions, by name).
    `cache` (experience_bank.runcache.RunCache): serve a run of the same content from it.
    `snapshots`: (share, step) pairs (trainers.steps.curve_steps) at which the model is also saved,
    as result.snapshots, for a trial's curve.
    """
    check_seed(seed)  # first: set_seed would refuse it only after the work directory holds this run_key
    out = Path(out_dir).resolve()
    if threads:  # before the cache: a served run leaves the process as a trained one would
        torch.set_num_threads(threads)
    if cache is not None and ckpt.read_result(out) is None:
        key = run_cache_key(card, parent_dir, examples, fraction=fraction, reward_funcs=reward_funcs,
                            resume_from=resume_from, seed=seed, threads=threads, launch=launch,
                            snapshots=[s for _, s in snapshots])
        return cache.run(key, out, lambda: train(card, parent_dir, examples, out_dir=out_dir, run_key=run_key,
                                                 fraction=fraction, reward_funcs=reward_funcs, resume_from=resume_from,
                                                 seed=seed, threads=threads, progress=progress, launch=launch,
                                                 snapshots=snapshots),
                         dump=lambda r: r.model_dump_json(), load=lambda text, d: _served(text, d, run_key, resume_from))
    if launch is not None:
        from trainers.launch import train_launched

        return train_launched(card, parent_dir, examples, out_dir=out_dir, run_key=run_key, fraction=fraction,
                              resume_from=resume_from, seed=seed, threads=threads, spec=launch, snapshots=snapshots)
    done = ckpt.read_result(out)
    if done is not None:
        if done.run_key != run_key:
            raise BadInput(f"{out} holds the result of run {done.run_key!r}: choose another --out")
        return done
    _validate(card, parent_dir, examples, reward_funcs)
    schedule, stop_at = plan_steps(card, fraction)
    work = _work_dir(out, run_key)
    start, _ = _start_state(work, resume_from, schedule, stop_at)
    resumed_step = json.loads((start / "trainer_state.json").read_text())["global_step"] if start else 0

    t0 = time.perf_counter()
    set_seed(seed)  # LoRA's initial A matrices are drawn here, before the Trainer seeds: same key, same run
    model, tokenizer = _load(card, parent_dir)
    trainer = _trainer(card, model, tokenizer, examples, reward_funcs, _common_args(card, work, schedule, seed),
                       [_StopAt(stop_at, progress), _Snapshots([s for _, s in snapshots], work, tokenizer)])
    trainer.remove_callback(PrinterCallback)  # logs go to log_history and the result, not stdout
    trainer.train(resume_from_checkpoint=str(start) if start else None)
    wall = time.perf_counter() - t0

    if trainer.is_world_process_zero():
        _publish(trainer, tokenizer, card, parent_dir, out, work, run_key=run_key, fraction=fraction, wall=wall,
                 resumed_step=resumed_step, resume_from=resume_from, snapshots=snapshots)
    trainer.accelerator.wait_for_everyone()
    return ckpt.read_result(out)


def _step_log(history: list[dict], step: int) -> dict[str, float]:
    """Loss and gradient norm logged at `step`, where finite."""
    logged = [h for h in history if h.get("step") == step]
    return {k: float(h[k]) for h in logged for k in ("loss", "grad_norm")
            if k in h and math.isfinite(float(h[k]))}


def _publish(trainer, tokenizer, card, parent_dir, out: Path, work: Path, *, run_key, fraction, wall,
             resumed_step, resume_from, snapshots=()) -> None:
    """Stage the child, its checks and result, rename it into place, drop the work dir."""
    ckpt.discard_stale_staging(out)
    stage = ckpt.staging_dir(out)
    adapter = _save_child(trainer, tokenizer, card, stage)
    trial = fraction < 1.0
    if trial:  # keep the optimizer/scheduler/rng state so nu = continue can resume it
        shutil.copytree(ckpt.last_trainer_checkpoint(work), stage / ckpt.STATE_DIR)
    history = trainer.state.log_history
    saved = []
    for share, step in snapshots:
        src = snapshot_dir(work, step)
        if not (src / _SNAPSHOT_DONE).is_file():
            raise RuntimeError(f"run {run_key}: the snapshot of step {step} was not saved (did the run start after it?)")
        shutil.copytree(src, snapshot_dir(stage, step), ignore=shutil.ignore_patterns(_SNAPSHOT_DONE))
        saved.append(Snapshot(step=step, fraction=share, path=str(snapshot_dir(Path("."), step)),
                              sha256=ckpt.weights_sha256(src), log=_step_log(history, step)))
    prefix = _trial_prefix(resume_from)
    log, tokens = _final_log(history, card.method, resumed_step, prefix)
    result = TrainResult(
        card_id=card.id, run_key=run_key, parent_sha256=ckpt.weights_sha256(parent_dir),
        checkpoint=str(out), checkpoint_sha256=ckpt.weights_sha256(stage),
        adapter_dir=str(out / adapter) if adapter else None, steps=trainer.state.global_step,
        steps_run=trainer.state.global_step - prefix, nominal_steps=card.budget.steps, fraction=fraction, wall_seconds=wall, train_tokens=tokens, log=log,
        sanity=run_checks(card.method, history, parent_dir, str(stage)),
        never_promotable=trial, resumed_from=str(resume_from) if resume_from else None, snapshots=tuple(saved),
    )
    (stage / ckpt.RESULT_FILE).write_text(result.model_dump_json(indent=2))
    ckpt.publish(stage, out)
    shutil.rmtree(work, ignore_errors=True)
