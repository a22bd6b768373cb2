"""The local world: a user's model folder and upstream-format dataset files behind the same interface
as the embedded world; bad files and model folders refused in one line before anything is written.

Fast tests use the fixtures in tests/fixtures/local (FinQA, TAT-QA, Spider, BIRD dev, xLAM), the
IFEval/BFCL data the installed packages ship, and a tiny random Llama saved with a tokenizer
trained here. The slow ones run a whole CPU episode on the smol base and the accelerate launcher
with two CPU processes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from agent.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "local"
DATA = {"data_finqa": FIX / "finqa" / "train.json", "data_tatqa": FIX / "tatqa" / "tatqa_dataset_train.json",
        "data_spider": FIX / "spider" / "train_spider.json", "data_bird": FIX / "bird",
        "data_xlam": FIX / "xlam" / "xlam_function_calling.jsonl"}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer random Llama with a BPE tokenizer and a ChatML template (seconds to make)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agent.world.tokenizer import train_tokenizer

    out = tmp_path_factory.mktemp("tiny") / "model"
    texts = [json.dumps(r) for r in json.loads((FIX / "finqa" / "train.json").read_text())[:40]]
    tok = train_tokenizer(texts, 400, 256)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                         max_position_embeddings=256, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id, bos_token_id=None))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _config(tmp_path: Path, model: Path | str, **over) -> Path:
    values = {"base_model": str(model), **{k: str(v) for k, v in DATA.items()}, "bank": str(tmp_path / "bank.sqlite"),
              "out": str(tmp_path / "runs" / "ep"), "step_scale": 0.1, "eval_n": 4, "ifeval_n": 4, "captrack_n": 7, "tracking": False, **over}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in values.items() if v is not None}))
    return path


def _refused(capsys, tmp_path: Path, cfg: Path, *needles: str) -> str:
    """`agent run --config cfg` exits 2 with one line holding every needle, and writes nothing."""
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["run", "--config", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agent: error: ") and "\n" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no bank, no run directory
    return err


# --- the interface ---------------------------------------------------------------------


def test_local_world_implements_the_interface_with_content_hash_splits(tmp_path, tiny_model):
    from agent.config import build_config
    from agent.world.catalogue import catalogue
    from agent.world.interface import WorldData
    from agent.world.local import local_world
    from agent.world.store import World
    from evaluators.tasks.splits import SPLITS, split_of

    world = local_world(build_config(str(_config(tmp_path, tiny_model))))
    assert isinstance(world, WorldData) and World.__dict__.get("items") and isinstance(world.step_scale, float)
    for task in ("finance/source", "finance/target", "sql/source", "sql/target", "function/source",
                 "function/target", "ifeval"):
        ids = {s: {x["id"] for x in world.items(task, s)} for s in SPLITS}
        assert sum(map(len, ids.values())) == len(set().union(*ids.values()))  # disjoint
        for split in SPLITS:
            for item in world.items(task, split, 3):  # the embedded world's rule, on the item's content
                assert split_of(task, item["messages"][-1]["content"]) == split
    cards = catalogue(world)
    assert len(cards) == 24 and {m.dataset.sha256 for c in cards for m in c.data.mix} <= set(world.datasets.values())
    s01 = next(c for c in cards if c.id == "S01")
    assert s01.budget.steps == max(4, round(120 * 0.1))
    rows = world.sft_examples("finance/target-cot/train")
    assert rows[0]["task"] == "finance/target" and rows[0]["completion"][0]["content"].count("\n") >= 2
    schema = world.sft_examples("sql/target-schema/train")[0]["prompt"][0]["content"].splitlines()[0]
    assert "note(" not in schema  # cut to the tables the gold SQL names
    assert world.items("captrack", "validation", 4)  # the project's own probes


def test_local_world_hashes_follow_the_files(tmp_path, tiny_model):
    from agent.config import build_config
    from agent.world.local import local_world

    a = local_world(build_config(str(_config(tmp_path, tiny_model))))
    rows = json.loads(DATA["data_finqa"].read_text())
    rows[0]["qa"]["exe_ans"] = 12345.0
    (tmp_path / "finqa.json").write_text(json.dumps(rows))
    b = local_world(build_config(str(_config(tmp_path, tiny_model, data_finqa=str(tmp_path / "finqa.json")))))
    assert a.datasets["sql/source/train"] == b.datasets["sql/source/train"]
    assert a.recipe_sha256 != b.recipe_sha256


def test_embedded_world_reads_the_same_through_the_interface():
    from agent.world.store import EmbeddedTasks
    from evaluators import tasks

    data = EmbeddedTasks(0)
    assert data.items("sql/target", "validation", 3) == tasks.items("sql/target", "validation", 0, 3)
    assert data.sft_examples("sql/target/train", 5) == tasks.sft_examples("sql/target/train", 0, 5)


# --- bad input: one line naming the file, the layout and the fix; exit 2; nothing written -----


def test_missing_dataset_file(tmp_path, capsys, tiny_model):
    cfg = _config(tmp_path, tiny_model, data_tatqa=str(tmp_path / "nope" / "tatqa.json"))
    _refused(capsys, tmp_path, cfg, "nope/tatqa.json not found", "expected a TAT-QA json file")


def test_dataset_in_the_wrong_layout(tmp_path, capsys, tiny_model):
    (tmp_path / "tatqa.json").write_text(json.dumps([{"table": {"rows": []}, "questions": []}]))
    cfg = _config(tmp_path, tiny_model, data_tatqa=str(tmp_path / "tatqa.json"))
    _refused(capsys, tmp_path, cfg, "tatqa.json", "missing field", "expected a TAT-QA json file")
    (tmp_path / "x.jsonl").write_text(json.dumps({"id": 1, "query": "q", "tools": "[]"}) + "\n")
    cfg = _config(tmp_path, tiny_model, data_xlam=str(tmp_path / "x.jsonl"))
    _refused(capsys, tmp_path, cfg, "x.jsonl line 1", "cannot be scored", "xLAM-style JSON lines")


def test_bird_question_whose_database_is_absent(tmp_path, capsys, tiny_model):
    bird = tmp_path / "bird"
    shutil.copytree(DATA["data_bird"], bird)
    shutil.rmtree(bird / "dev_databases" / "financial")
    cfg = _config(tmp_path, tiny_model, data_bird=str(bird))
    _refused(capsys, tmp_path, cfg, "dev.json row", "'financial'", "financial.sqlite is missing",
             "dev_databases/<db_id>/<db_id>.sqlite", "add the database or drop its questions")


def test_bfcl_row_without_a_possible_answer(tmp_path, capsys, tiny_model):
    from evaluators.loaders import bfcl_data_dir

    src, dst = bfcl_data_dir(), tmp_path / "bfcl"
    (dst / "possible_answer").mkdir(parents=True)
    shutil.copy(src / "BFCL_v4_simple_python.json", dst)
    answers = (src / "possible_answer" / "BFCL_v4_simple_python.json").read_text().splitlines()
    (dst / "possible_answer" / "BFCL_v4_simple_python.json").write_text("\n".join(answers[1:]) + "\n")
    cfg = _config(tmp_path, tiny_model, data_bfcl_dir=str(dst))
    _refused(capsys, tmp_path, cfg, "simple_python_0 has no possible answer", "cannot be scored",
             "add its answer or drop the question")


def test_a_family_file_not_given(tmp_path, capsys, tiny_model):
    cfg = _config(tmp_path, tiny_model)
    values = yaml.safe_load(cfg.read_text())
    del values["data_spider"]
    cfg.write_text(yaml.safe_dump(values))
    _refused(capsys, tmp_path, cfg, "data_spider is not", "runs/smol-local.yaml")


def test_model_folder_without_safetensors(tmp_path, capsys, tiny_model):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    for f in model.glob("*.safetensors"):
        f.unlink()
    _refused(capsys, tmp_path, _config(tmp_path, model), "no *.safetensors", "save_pretrained")


def test_tokenizer_without_a_chat_template(tmp_path, capsys, tiny_model):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    (model / "chat_template.jinja").unlink(missing_ok=True)
    conf = json.loads((model / "tokenizer_config.json").read_text())
    conf.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(conf))
    _refused(capsys, tmp_path, _config(tmp_path, model), "has no chat template", "chat_template.jinja")


def test_qwen3_profile_names_the_absent_model_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    before = sorted(p.name for p in (ROOT / "runs").iterdir())
    assert main(["run", "--config", "runs/qwen3-4b.yaml", "--quiet", "--no-tracking",
                 "--bank", str(tmp_path / "b.sqlite"), "--out", str(tmp_path / "ep")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "base model /models/Qwen3-4B not found" in err
    assert sorted(p.name for p in (ROOT / "runs").iterdir()) == before and not list(tmp_path.iterdir())


def test_gpu_parts_refused_in_one_line_when_missing(tmp_path, capsys, tiny_model):
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        _refused(capsys, tmp_path, _config(tmp_path, tiny_model, backend="vllm"), "backend vllm", "backend: openai (docs/gpu.md)")
    if importlib.util.find_spec("deepspeed") is None:
        _refused(capsys, tmp_path, _config(tmp_path, tiny_model, launcher="accelerate"), "DeepSpeed", "launcher: local")


def test_launch_command_is_accelerate_with_the_deepspeed_json():
    from trainers.launch import LaunchSpec, command

    cmd = command(LaunchSpec(deepspeed_config="runs/deepspeed_zero2.json"), ["--card", "c.json"])
    assert cmd[1:5] == ["-m", "accelerate.commands.launch", "--config_file", "runs/accelerate_zero2.yaml"]
    assert cmd[cmd.index("--deepspeed_config_file") + 1] == "runs/deepspeed_zero2.json"
    assert cmd[-5:] == ["-m", "agent", "train", "--card", "c.json"]


# --- slow: the launcher on two CPU processes, and the whole CPU episode on the smol base ---------


@pytest.mark.slow
def test_accelerate_launch_two_cpu_processes_reads_the_result_as_a_local_run(tmp_path, tiny_model):
    from agent.config import build_config
    from agent.world.catalogue import card_by_id
    from agent.world.examples import card_examples
    from agent.world.local import local_world
    from trainers.launch import LaunchSpec
    from trainers.run import train

    world = local_world(build_config(str(_config(tmp_path, tiny_model))))
    card = card_by_id(world, "S04")  # LoRA r=8 finance SFT
    cpu = tmp_path / "accelerate_cpu.yaml"
    cpu.write_text(yaml.safe_dump({"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_CPU",
                                   "num_machines": 1, "num_processes": 2, "machine_rank": 0, "use_cpu": True,
                                   "mixed_precision": "no", "main_training_function": "main"}))
    t0 = time.monotonic()
    env = {"OMP_NUM_THREADS": "1"}
    os.environ.update(env)
    result = train(card, world.base_dir, card_examples(card, world, 0), out_dir=str(tmp_path / "run"),
                   run_key="launch-s04", fraction=0.5, seed=0, threads=1,
                   launch=LaunchSpec(config_file=str(cpu), num_processes=2, cpu=True))
    print(f"two-process CPU launch: {time.monotonic() - t0:.1f} s")
    assert result.run_key == "launch-s04" and result.steps == card.budget.steps // 2
    assert (Path(result.checkpoint) / "model.safetensors").is_file() and result.adapter_dir
    assert not (tmp_path / "run.launch").exists()
    again = train(card, world.base_dir, [], out_dir=str(tmp_path / "run"), run_key="launch-s04",
                  launch=LaunchSpec(config_file=str(cpu), num_processes=2, cpu=True))
    assert again == result  # published once; read back like a local run


@pytest.fixture(scope="module")
def smol_episode(tmp_path_factory):
    """`agent run --config runs/smol-local.yaml` once (its seed bank first, as a new user's would be;
    the seed records are cached under $AGENT_CACHE, so a second run takes the episode's time only)."""
    tmp = tmp_path_factory.mktemp("smol-local")
    return _smol_run(tmp / "ep", tmp / "bank.sqlite", "seed bank included")


def _smol_run(out: Path, bank: Path, label: str) -> tuple[int, Path]:
    """`agent run --config runs/smol-local.yaml` from the repository root, timed."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        t0 = time.monotonic()
        rc = main(["run", "--config", "runs/smol-local.yaml", "--quiet", "--no-tracking", "--out", str(out),
                   "--bank", str(bank)])
        print(f"smol-local episode ({label}): {time.monotonic() - t0:.0f} s")
    finally:
        os.chdir(cwd)
    return rc, out


def _actions(out: Path) -> list[str]:
    return [json.loads(x)["decision"]["action"] for x in (out / "decisions.jsonl").read_text().splitlines() if x.strip()]


@pytest.mark.cpu_proof
def test_smol_local_episode_runs_whole_on_cpu(smol_episode):
    """A whole episode on the local world: every library card decided, a report, a clean audit."""
    rc, out = smol_episode
    assert rc == 0
    assert len(_actions(out)) == 3 and set(_actions(out)) <= {"reject", "validate", "train"}
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    assert main(["audit", str(out), "--json"]) == 0


CRAFTED = {"S09": ("A", 10.0), "S04": ("B", 6.0), "S12": ("C", 1.0)}
"""Evidence of the crafted library (card -> grade, source gain in pp): chosen so that BCIT routes
one card to Train, one to Validate and one to Reject, as tests/test_run_e2e.py does on the
test-size world. The routing is then certain; the runs, the gate, the report and the audit are real."""


@pytest.fixture(scope="module")
def crafted_smol_episode(tmp_path_factory):
    """The smol-local episode on a library imported with `agent bank import` (the path a user with
    records from elsewhere takes): the records are observed on this model and these data."""
    from agent.config import build_config
    from agent.world.catalogue import applicability, card_by_id, runtime_of
    from agent.world.local import local_world
    from experience_bank.hashing import content_hash
    from experience_bank.records import HistoricalRecord, Provenance, SourceContext, SourceEvidence

    tmp = tmp_path_factory.mktemp("smol-crafted")
    out, bank, cwd = tmp / "ep", tmp / "bank.sqlite", os.getcwd()
    os.chdir(ROOT)
    try:
        world = local_world(build_config("runs/smol-local.yaml"))
        lines = []
        for cid, (grade, delta) in CRAFTED.items():
            card = card_by_id(world, cid)
            data = {m.dataset.id: m.dataset.sha256 for m in card.data.mix}
            lines.append(HistoricalRecord(
                card=card, source=SourceContext(parent=world.model, stage=0, family=card.family,
                                                task=f"{card.family}/source", datasets=data, runtime=runtime_of(card),
                                                eval_protocol=world.eval_protocol,
                                                output_protocol=world.output_protocols[card.family]),
                evidence=SourceEvidence(target_metric=f"{card.family}/source.score", delta_src=delta, delta_point=delta,
                                        kappa=10.0, grade=grade, chi=1 if grade == "A" else 0,
                                        replicates=2 if grade == "A" else 1),
                applicability=applicability(card, world),
                provenance=Provenance(model_sha256=world.model.sha256, data_sha256=data,
                                      config_sha256=card.content_hash(), eval_sha256=content_hash(["crafted", cid]),
                                      produced_by="tests/test_local_world.py (crafted)")).model_dump_json())
        (tmp / "records.jsonl").write_text("\n".join(lines) + "\n")
        assert main(["bank", "init", "--bank", str(bank)]) == 0
        assert main(["bank", "import", str(tmp / "records.jsonl"), "--bank", str(bank)]) == 0
    finally:
        os.chdir(cwd)
    return _smol_run(out, bank, "on the imported library")


@pytest.mark.cpu_proof
def test_smol_local_episode_reaches_reject_validate_train_and_a_gate_verdict(crafted_smol_episode):
    rc, out = crafted_smol_episode
    assert rc == 0
    assert {"reject", "validate", "train"} <= set(_actions(out))
    verdicts = list((out / "steps").glob("*/verdict.json"))
    assert verdicts, "a full run judged by the gate"
    assert (out / "report.md").is_file() and main(["audit", str(out), "--json"]) == 0


def test_bank_import_takes_records_observed_elsewhere_and_scores_their_context(tmp_path, tiny_model):
    """Another team's record (another model, its own eval protocol) on these data: `agent bank import`
    accepts it, and the authorizer's fields score the differing x_s lower than a record observed here."""
    from agent.config import build_config
    from agent.experiments.retro_ports import base_context
    from agent.world.catalogue import applicability, card_by_id
    from agent.world.local import local_world
    from experience_bank.bank import Bank
    from experience_bank.hashing import content_hash
    from experience_bank.records import HistoricalRecord, ModelRef, Provenance, SourceContext, SourceEvidence
    from policies import compile as compile_features

    world = local_world(build_config(str(_config(tmp_path, tiny_model))))
    card = card_by_id(world, "S09")
    other = ModelRef(id="team-b/qwen3-0.6b", sha256=content_hash("team b weights"), arch="qwen3",
                     chat_template_sha256=content_hash("team b template"))

    def record(parent: ModelRef, eval_protocol: str) -> HistoricalRecord:
        data = {"function/source/train": world.datasets["function/source/train"]}
        return HistoricalRecord(
            card=card, source=SourceContext(parent=parent, stage=0, family="function", task="function/source",
                                            datasets=data, runtime="trl-sft", eval_protocol=eval_protocol,
                                            output_protocol="json-call"),
            evidence=SourceEvidence(target_metric="function/source.ast_acc", delta_src=8.0, delta_point=9.0,
                                    kappa=10.0, grade="A", chi=1, retention=(), replicates=2),
            applicability=applicability(card, world),
            provenance=Provenance(model_sha256=parent.sha256, data_sha256=data, config_sha256=card.content_hash(),
                                  eval_sha256=content_hash(eval_protocol), produced_by=f"observed on {parent.id}"))

    theirs, ours = record(other, "team-b-eval"), record(world.model, world.eval_protocol)
    (tmp_path / "theirs.jsonl").write_text(theirs.model_dump_json() + "\n")
    assert main(["bank", "init", "--bank", str(tmp_path / "bank.sqlite")]) == 0
    assert main(["bank", "import", str(tmp_path / "theirs.jsonl"), "--bank", str(tmp_path / "bank.sqlite")]) == 0
    with Bank.open(tmp_path / "bank.sqlite") as bank:
        [entry] = bank.library_records()
    assert entry.record.source.parent.id == "team-b/qwen3-0.6b"
    ctx = base_context(world)
    f_theirs, f_ours = compile_features(entry.record, ctx), compile_features(ours, ctx)
    assert f_theirs.fields.parent < f_ours.fields.parent == 1.0
    assert f_theirs.fields.protocol < f_ours.fields.protocol
    print(f"imported: fields {f_theirs.fields} A={f_theirs.A} Q={f_theirs.Q}; observed here: A={f_ours.A} Q={f_ours.Q}")
    assert f_theirs.Q < f_ours.Q
