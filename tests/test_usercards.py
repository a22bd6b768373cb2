"""The user's own recipes as candidates: `agent cards import` on TRL and LlamaFactory configs
(written here in the shape of their own examples), every key mapped or refused, and the folder
decided by `agent run --cards`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agent.cli.main import main
from experience_bank.hashing import file_sha256

RECIPES = Path(__file__).resolve().parent / "fixtures" / "recipes"
CONFIG = str(Path(__file__).resolve().parents[1] / "runs" / "test.yaml")


@pytest.fixture(scope="module")
def world():
    from agent.world.embedded import ensure_world

    return ensure_world("test")


def _import(world, name: str, **kw):
    from agent.world.usercards.recipes import import_recipe

    return import_recipe(RECIPES / name, world, device_hours=kw.pop("device_hours", 2.0), **kw)


def test_a_trl_sft_config_becomes_a_card_with_every_key_accounted_for(world):
    got = _import(world, "trl_sft_sql.yaml")
    card, keys = got.proposal.card, set(yaml.safe_load((RECIPES / "trl_sft_sql.yaml").read_text()))
    assert (got.fmt, card.method, card.family, card.id) == ("trl-sft", "sft", "sql", "U-trl_sft_sql")
    assert card.hparams.learning_rate == 2.0e-4 and card.hparams.batch_size == 8 and card.budget.steps == 8
    assert card.hparams.warmup_ratio == 0.1 and card.hparams.max_length == 512 and card.adapter.kind == "full"
    assert card.data.n_examples == 64 and card.data.mix[0].dataset.sha256 == world.datasets["sql/target/train"]
    assert set(got.mapped) | set(got.run_owned) == keys and not set(got.mapped) & set(got.run_owned)
    assert got.run_owned == ("gradient_checkpointing", "logging_steps", "model_name_or_path", "output_dir",
                             "report_to", "seed")
    assert got.proposal.provenance.config_sha256 == file_sha256(str(RECIPES / "trl_sft_sql.yaml"))
    assert got.proposal.applicability.runtime == "trl-sft" and got.proposal.applicability.output_protocol == "sql"


def test_a_trl_grpo_config_and_a_llamafactory_lora_config(world):
    grpo = _import(world, "trl_grpo_sql.yaml").proposal.card
    assert grpo.method == "grpo" and grpo.hparams.rewards == ("execution", "format")
    assert (grpo.hparams.num_generations, grpo.hparams.beta, grpo.hparams.lr_scheduler) == (4, 0.04, "constant")
    assert grpo.data.n_examples == 4 * (8 // 4)  # prompts: steps x batch / generations
    lf = _import(world, "llamafactory_lora_sft.yaml")
    card = lf.proposal.card
    assert lf.fmt == "llamafactory" and card.adapter.kind == "lora" and card.adapter.rank == 8
    assert card.adapter.targets == ("q_proj", "v_proj") and card.adapter.alpha == 16
    assert [m.dataset.id for m in card.data.mix] == ["sql/target/train", "sql/target-schema/train"]
    assert card.data.n_examples == 64 and card.budget.steps == 8  # ceil(1 epoch x 64 samples / batch 8)
    assert lf.proposal.applicability.runtime == "peft-lora"
    keys = set(yaml.safe_load((RECIPES / "llamafactory_lora_sft.yaml").read_text()))
    assert set(lf.mapped) | set(lf.run_owned) == keys


def test_trl_values_are_read_as_trls_own_parser_reads_them(world, tmp_path):
    # YAML 1.1 reads `1e-4` (no dot) as a string; `trl sft --config` passes it through argparse's float,
    # so TRL trains at 1e-4, and so does the card. The same for a quoted number or bool.
    from agent.world.usercards.recipes import import_recipe
    from agent.world.usercards.trl_schema import as_trl_reads
    text = SFT.replace("learning_rate: 2.0e-4", "learning_rate: 1e-4").replace("max_steps: 8", 'max_steps: "8"')
    path = tmp_path / "plain_exponent.yaml"
    path.write_text(text)
    card = import_recipe(path, world, device_hours=2.0).proposal.card
    assert card.hparams.learning_rate == 1e-4 and card.budget.steps == 8
    read = as_trl_reads({"learning_rate": "1e-4", "use_peft": "true", "max_steps": "1e3", "dataset_name": "x"}, "sft")
    assert read == {"learning_rate": 1e-4, "use_peft": True, "max_steps": "1e3", "dataset_name": "x"}  # int("1e3") fails


def _bad(tmp_path, text: str) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


SFT = (RECIPES / "trl_sft_sql.yaml").read_text()


@pytest.mark.parametrize("text, says", [
    (SFT + "lerning_rate: 0.1\n", "unknown key 'lerning_rate'"),
    (SFT.replace("learning_rate: 2.0e-4", "learning_rate: fast"), "learning_rate = 'fast' is not a float"),
    (SFT.replace("max_steps: 8", "max_steps: 1e3"), "max_steps = '1e3' is not a int"),
    (SFT.replace("sql/target/train", "sql/nope/train"), "dataset 'sql/nope/train' is not a pool of this world"),
    (SFT + "optim: adamw_torch\n", "key 'optim' is refused"),
    (SFT.replace("lr_scheduler_type: cosine", "lr_scheduler_type: polynomial"), "lr_scheduler_type 'polynomial'"),
    ((RECIPES / "llamafactory_lora_sft.yaml").read_text().replace("lora_rank: 8", "lora_rank: eight"),
     "lora_rank = 'eight' is not a int"),
    ((RECIPES / "llamafactory_lora_sft.yaml").read_text() + "lora_dropout: 0.1\n", "unknown key 'lora_dropout'"),
    # the key the user wrote, not a card field derived from it (data.n_examples)
    (SFT.replace("per_device_train_batch_size: 4", "per_device_train_batch_size: 0"),
     "per_device_train_batch_size = 0: set it to 1 or more"),
    ((RECIPES / "llamafactory_lora_sft.yaml").read_text().replace("gradient_accumulation_steps: 2",
                                                                 "gradient_accumulation_steps: -2"),
     "gradient_accumulation_steps = -2: set it to 1 or more"),
    (SFT.replace("max_steps: 8", "max_steps: 99999999999999999999"),
     "n_examples (from max_steps x the batch (per_device_train_batch_size x gradient_accumulation_steps)): "
     "Input should be less than or equal to 1000000"),
])
def test_a_bad_recipe_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, text, says):
    out = tmp_path / "cards"
    rc = main(["cards", "import", str(_bad(tmp_path, text)), "--config", CONFIG, "--device-hours", "2",
               "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0], err
    assert not out.exists()


def _no_world(*a, **k):
    raise AssertionError("agent cards import built the world before checking its flags and file")


@pytest.mark.parametrize("text, flags, says", [
    ("lr: [1, 2\n", (), "is not valid YAML at line 2"),
    (SFT + "max_steps: 9\n", (), "duplicate key 'max_steps'"),
    ("- max_steps: 8\n", (), "must be a mapping"),
    (SFT, ("--device-hours", "inf"), "--device-hours inf is refused (Input should be a finite number)"),
    (SFT, ("--device-hours", "nan"), "--device-hours nan is refused (Input should be a finite number)"),
    (SFT, ("--device-hours", "1e6"), "--device-hours 1e+06 is refused (Input should be less than or equal to 100000)"),
    (SFT, ("--device-hours", "0"), "--device-hours 0 is refused (Input should be greater than 0)"),
    (SFT, ("--out", "{file}"), "is an existing file: give a directory path"),
    (SFT, ("--out", "{file}/cards"), "which is a file: give a directory path"),
    # every key but the datasets' pools is read without the world (recipes.read_recipe)
    (SFT + "lerning_rate: 0.1\n", (), "unknown key 'lerning_rate'"),
    (SFT.replace("learning_rate: 2.0e-4", "learning_rate: fast"), (), "learning_rate = 'fast' is not a float"),
    (SFT + "optim: adamw_torch\n", (), "key 'optim' is refused"),
    ((RECIPES / "llamafactory_lora_sft.yaml").read_text() + "lora_dropout: 0.1\n", (), "unknown key 'lora_dropout'"),
    (SFT, ("--target", "finance/target"), "--target finance/target is not the target suite of family sql"),
])
def test_what_the_flags_and_file_refuse_is_refused_before_the_world_is_built(tmp_path, monkeypatch, capsys, text,
                                                                               flags, says):
    monkeypatch.setattr("agent.cli.cards.world_for", _no_world)
    recipe, taken = _bad(tmp_path, text), tmp_path / "taken"
    taken.write_text("a file\n")
    argv = ["cards", "import", str(recipe), "--config", CONFIG, "--device-hours", "2", "--out", str(tmp_path / "out"),
            *(f.replace("{file}", str(taken)) for f in flags)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agent: error: ") and says in err[0], err
    assert recipe.read_text() == text and taken.read_text() == "a file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "taken"]


def test_a_folder_or_a_taken_card_id_is_refused_before_the_world_is_built(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("agent.cli.cards.world_for", _no_world)
    out = tmp_path / "cards"
    out.mkdir()
    (out / "U-bad.json").write_text("the card imported before\n")
    recipe = _bad(tmp_path, SFT)
    for source, flags, says in [(RECIPES, (), "is a directory: pass one YAML file"),
                                (recipe, (), f"{out / 'U-bad.json'} already holds card U-bad: pass --replace"),
                                (recipe, ("--id", "U-bad"), "already holds card U-bad: pass --replace")]:
        assert main(["cards", "import", str(source), "--config", CONFIG, "--device-hours", "2", "--out", str(out),
                     *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert (out / "U-bad.json").read_text() == "the card imported before\n"
    assert sorted(p.name for p in out.iterdir()) == ["U-bad.json"]


def test_import_writes_the_card_and_run_cards_folder_is_checked(tmp_path, capsys):
    out = tmp_path / "cards"
    for name in ("trl_sft_sql.yaml", "trl_grpo_sql.yaml", "llamafactory_lora_sft.yaml"):
        assert main(["cards", "import", str(RECIPES / name), "--config", CONFIG, "--device-hours", "2",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "learning_rate -> hparams.learning_rate" in printed and "set by the agent" in printed
    written = json.loads((out / "U-trl_sft_sql.json").read_text())
    again = ["cards", "import", str(RECIPES / "trl_sft_sql.yaml"), "--config", CONFIG, "--device-hours", "3",
             "--out", str(out)]
    assert main(again) == 2 and "already holds card U-trl_sft_sql" in capsys.readouterr().err
    assert json.loads((out / "U-trl_sft_sql.json").read_text()) == written
    assert main([*again, "--replace"]) == 0
    assert json.loads((out / "U-trl_sft_sql.json").read_text())["record"]["card"]["budget"]["device_hours"] == 3
    assert main([*again[:-4], "--device-hours", "2", "--out", str(out), "--replace"]) == 0
    assert json.loads((out / "U-trl_sft_sql.json").read_text()) == written
    assert written["import"]["sha256"] == file_sha256(str(RECIPES / "trl_sft_sql.yaml"))
    assert written["record"]["provenance"]["config_sha256"] == written["import"]["sha256"]
    from agent.world.usercards.folder import read_folder
    from experience_bank.errors import BadInput

    assert sorted(p.card.id for p in read_folder(out)) == ["U-llamafactory_lora_sft", "U-trl_grpo_sql",
                                                          "U-trl_sft_sql"]
    with pytest.raises(BadInput, match="U-trl_sft_sql .* already taken in the bank's library .* rename it"):
        read_folder(out, {"U-trl_sft_sql": frozenset({"0" * 64})})
    from experience_bank.records import parse_record

    sft = parse_record(json.dumps(json.loads((out / "U-trl_sft_sql.json").read_text())["record"]))
    same = {"U-trl_sft_sql": frozenset({sft.card.content_hash()})}
    assert len(read_folder(out, same)) == 3  # the library's own card under its id: the same card
    # a run that names a folder with a damaged card stops before writing anything
    (out / "broken.json").write_text("{}")
    run_dir = tmp_path / "ep"
    assert main(["run", "--config", CONFIG, "--cards", str(out), "--out", str(run_dir), "--bank",
                 str(tmp_path / "bank.sqlite"), "--quiet", "--no-tracking"]) == 2
    assert "broken.json is not an imported card" in capsys.readouterr().err
    assert not run_dir.exists() and not (tmp_path / "bank.sqlite").exists()


@pytest.mark.parametrize("only", [False, True])
def test_run_cards_decides_the_folder_beside_or_instead_of_the_catalogue(tmp_path, monkeypatch, only):
    import agent.loop.episode as episode
    from agent.config import build_config
    from test_run_e2e import PLAN, crafted_bank

    out = tmp_path / "cards"
    for name in ("trl_sft_sql.yaml", "trl_grpo_sql.yaml", "llamafactory_lora_sft.yaml"):
        assert main(["cards", "import", str(RECIPES / name), "--config", CONFIG, "--device-hours", "2",
                     "--out", str(out)]) == 0
    crafted_bank(tmp_path / "bank.sqlite")
    seen = {}

    def drive(ctx, initial, checkpoints, answer=None):  # the loop itself is tested elsewhere: here, what it is given
        seen["ids"] = sorted(e.record.card.id for e in ctx.entries.values())
        seen["kinds"] = {e.record.card.id: e.record.kind for e in ctx.entries.values()}
        return {"episode_id": ctx.episode_id}

    monkeypatch.setattr(episode, "drive", drive)
    flags = {"cards": str(out), "cards_only": only or None, "bank": str(tmp_path / "bank.sqlite"),
             "out": str(tmp_path / "ep"), "quiet": True, "tracking": False}
    episode.run_episode(build_config(CONFIG, flags))
    users = ["U-llamafactory_lora_sft", "U-trl_grpo_sql", "U-trl_sft_sql"]
    assert seen["ids"] == sorted(users + ([] if only else list(PLAN)))
    assert all(seen["kinds"][u] == "proposal" for u in users)  # no library evidence: the new-card branch
    # frozen with the run: a resume decides the same cards when the folder is gone
    for p in out.iterdir():
        p.unlink()
    out.rmdir()
    episode.run_episode(build_config(CONFIG, {"quiet": True}), resume=str(tmp_path / "ep"))
    assert seen["ids"] == sorted(users + ([] if only else list(PLAN)))


def _library_with(path: Path, card, applicability, delta: float = 6.0) -> str:
    """The crafted L(0) plus one grade-B record of `card` (as consolidation leaves one); its hash."""
    from agent.world.embedded import ensure_world
    from agent.world.records import target_metric
    from agent.world.catalogue import runtime_of
    from experience_bank.bank import Bank
    from experience_bank.hashing import content_hash
    from experience_bank.records import HistoricalRecord, Provenance, SourceContext, SourceEvidence
    from test_run_e2e import crafted_bank

    world = ensure_world("test")
    crafted_bank(path)
    data = {m.dataset.id: m.dataset.sha256 for m in card.data.mix}
    record = HistoricalRecord(
        card=card, source=SourceContext(parent=world.model, stage=0, family=card.family, task=f"{card.family}/target",
                                        datasets=data, runtime=runtime_of(card), eval_protocol=world.eval_protocol,
                                        output_protocol=world.output_protocols[card.family]),
        evidence=SourceEvidence(target_metric=target_metric(card.family), delta_src=delta, delta_point=delta,
                                kappa=10.0, grade="B", chi=0, replicates=1),
        applicability=applicability, provenance=Provenance(
            model_sha256=world.model.sha256, data_sha256=data, config_sha256=card.content_hash(),
            eval_sha256=content_hash(["earlier episode"]), produced_by="episode ep-earlier"))
    with Bank.open(path) as bank:
        (h,) = bank.import_records([record], library_note="an earlier episode's consolidation")
    return h


@pytest.mark.parametrize("only", [False, True])
def test_a_card_the_library_holds_is_decided_on_its_records(tmp_path, monkeypatch, only):
    import agent.loop.episode as episode
    from agent.config import build_config
    from experience_bank.records import Proposal, parse_record

    out = tmp_path / "cards"
    for name in ("trl_sft_sql.yaml", "trl_grpo_sql.yaml"):
        assert main(["cards", "import", str(RECIPES / name), "--config", CONFIG, "--device-hours", "2",
                     "--out", str(out)]) == 0
    sft = parse_record(json.dumps(json.loads((out / "U-trl_sft_sql.json").read_text())["record"]))
    assert isinstance(sft, Proposal)
    held = _library_with(tmp_path / "bank.sqlite", sft.card, sft.applicability)
    seen = {}

    def drive(ctx, initial, checkpoints, answer=None):
        seen["entries"] = {h: (e.record.card.id, e.record.kind) for h, e in ctx.entries.items()}
        return {"episode_id": ctx.episode_id}

    monkeypatch.setattr(episode, "drive", drive)
    flags = {"cards": str(out), "cards_only": only or None, "bank": str(tmp_path / "bank.sqlite"),
             "out": str(tmp_path / "ep"), "quiet": True, "tracking": False}
    episode.run_episode(build_config(CONFIG, flags))
    users = sorted(v for v in seen["entries"].values() if v[0].startswith("U-"))
    assert users == [("U-trl_grpo_sql", "proposal"), ("U-trl_sft_sql", "historical")]
    assert seen["entries"][held] == ("U-trl_sft_sql", "historical")  # the library's record, its evidence
    assert len(seen["entries"]) == (2 if only else 2 + 3)


def test_another_card_under_a_library_id_is_refused_and_nothing_written(tmp_path, capsys):
    from experience_bank.records import parse_record

    out = tmp_path / "cards"
    assert main(["cards", "import", str(RECIPES / "trl_sft_sql.yaml"), "--config", CONFIG, "--device-hours", "2",
                 "--out", str(out)]) == 0
    sft = parse_record(json.dumps(json.loads((out / "U-trl_sft_sql.json").read_text())["record"]))
    bank = tmp_path / "bank.sqlite"
    _library_with(bank, sft.card, sft.applicability)
    changed = tmp_path / "trl_sft_sql.yaml"  # the same file name (so the same id), a new learning rate
    changed.write_text((RECIPES / "trl_sft_sql.yaml").read_text().replace("2.0e-4", "1.0e-4"))
    assert main(["cards", "import", str(changed), "--config", CONFIG, "--device-hours", "2", "--out", str(out),
                 "--replace"]) == 0
    capsys.readouterr()
    before = bank.read_bytes()
    run_dir = tmp_path / "ep"
    assert main(["run", "--config", CONFIG, "--cards", str(out), "--out", str(run_dir), "--bank", str(bank),
                 "--quiet", "--no-tracking"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "card id U-trl_sft_sql" in err[0] and "rename it" in err[0] and "new bank" in err[0], err
    assert not run_dir.exists() and bank.read_bytes() == before
