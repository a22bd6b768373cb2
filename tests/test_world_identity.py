"""One world id, one set of weights (issue 30): the build pins its own threads, the id names the
build environment, and a cached world or L(0) whose weights differ from its record is refused."""

import hashlib
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from agent.world.embedded import RECIPES, build_base_model, build_env, pinned_threads, recipe_sha256
from agent.world.store import World, world_dir
from experience_bank.errors import BadInput
from experience_bank.hashing import file_sha256, sha256_text
from experience_bank.records import ModelRef


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_world_id_names_the_build_threads_and_environment():
    recipe, env = RECIPES["test"], build_env()
    assert recipe_sha256(recipe) == recipe_sha256(recipe, env)  # this process's environment by default
    other_cpu = "AVX2" if env.cpu == "AVX512" else "AVX512"  # another kernel level than this machine's
    variants = [env, replace(env, libraries=env.libraries | {"torch": "0.0.0"}), replace(env, cpu=other_cpu),
                replace(env, machine="arm64"), replace(env, numerics="0" * 16)]
    ids = {recipe_sha256(recipe, e) for e in variants} | {recipe_sha256(replace(recipe, threads=2), env)}
    assert len(ids) == 6
    assert RECIPES["default"].threads == 1  # world-v4: both sizes build on one thread (docs/world.md)


def _fingerprint(env: dict[str, str]) -> str:
    code = "from agent.world.embedded import numerics_fingerprint; print(numerics_fingerprint())"
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                          env=os.environ | {"PYTHONPATH": str(root)} | env)
    return done.stdout.strip()


def test_the_numerics_fingerprint_tells_another_blas_path_apart_and_not_the_caller_s_threads():
    """The same machine's arithmetic gives one fingerprint whatever threads the caller runs; MKL's
    conditional-reproducibility mode (MKL_CBWR=COMPATIBLE: other kernels, other rounding, as MKL on
    another CPU vendor) gives another: what made two AVX512 machines build two bases of world 2."""
    import torch

    ours = _fingerprint({"OMP_NUM_THREADS": "2"})
    assert ours == _fingerprint({"OMP_NUM_THREADS": "1"}) and len(ours) == 16
    assert build_env().numerics == ours  # this process's build environment names it
    if not torch.backends.mkl.is_available():
        pytest.skip("torch without MKL: no MKL_CBWR to switch its kernels")
    assert _fingerprint({"MKL_CBWR": "COMPATIBLE"}) != ours


def test_the_build_runs_on_the_recipe_s_threads_whatever_the_caller_set(tmp_path):
    import torch

    # A few steps of the test-size recipe. (1 and 2 threads gave the same test-size base, 150 steps,
    # and the same first 30 steps of the default recipe here; the pin is what makes that a rule.)
    recipe = replace(RECIPES["test"], steps=4, early_step=2)
    weights, seen = {}, {}
    for n in (2, 1):
        seen[n] = set()
        with pinned_threads(n):  # what `--threads n` leaves torch at
            build_base_model(recipe, tmp_path / f"caller{n}" / "base",
                             lambda *_, n=n: seen[n].add(torch.get_num_threads()))
            assert torch.get_num_threads() == n  # the caller's count is back after the build
        weights[n] = file_sha256(str(tmp_path / f"caller{n}" / "base" / "model.safetensors"))
    assert seen == {2: {recipe.threads}, 1: {recipe.threads}} and recipe.threads == 1
    assert weights[1] == weights[2]


def _cached_world(root: Path, rhash: str, weights: bytes) -> World:
    """A cached test world (world.json and a base file) as a build would leave it."""
    (root / "base").mkdir(parents=True)
    (root / "base" / "model.safetensors").write_bytes(weights)
    tsha = sha256_text("template")
    world = World(size="test", seed=0, recipe_sha256=rhash, root=str(root), base_dir=str(root / "base"),
                  model=ModelRef(id="world-test/base", sha256=_sha(weights), arch="qwen3", chat_template_sha256=tsha),
                  chat_template_sha256=tsha, datasets={}, build=build_env())
    (root / "world.json").write_text(world.to_json())
    return world


def test_a_changed_cached_base_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    from agent.cli.main import main
    from agent.world.embedded import ensure_world

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))
    rhash = recipe_sha256(RECIPES["test"])
    root = world_dir("test", rhash)
    world = _cached_world(root, rhash, b"the weights the world was built with")
    assert ensure_world("test") == world  # intact: served from the cache
    (root / "base" / "model.safetensors").write_bytes(b"weights built elsewhere")
    bank = tmp_path / "bank.sqlite"
    for argv in (["world", "build", "--size", "test"], ["world", "seed-bank", "--size", "test", "--bank", str(bank)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("agent: error: world test-")
        assert _sha(b"weights built elsewhere")[:12] in err and world.model.sha256[:12] in err
    assert not bank.exists()  # nothing written


def test_a_world_under_another_world_id_is_refused(tmp_path, monkeypatch):
    from agent.world.embedded import ensure_world

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path))
    rhash = recipe_sha256(RECIPES["test"])
    _cached_world(world_dir("test", rhash), sha256_text("a build under another environment"), b"w")
    with pytest.raises(BadInput, match="not test-"):
        ensure_world("test")


def test_seed_records_are_keyed_to_the_base_and_another_base_s_records_are_refused(tmp_path):
    from agent.world.catalogue import catalogue
    from agent.world.seed_bank import plan_sha256, seed_dir, seed_records
    from support.bank_factory import record
    from test_catalogue import fake_world  # tests/ is on sys.path

    world = replace(fake_world("test"), root=str(tmp_path))
    other_base = replace(world, model=world.model.model_copy(update={"sha256": sha256_text("other weights")}))
    ids = [c.id for c in catalogue(world)]
    assert plan_sha256(world, ids) != plan_sha256(other_base, ids)
    cache = seed_dir(world) / f"records-{plan_sha256(world, ids)[:16]}.jsonl"
    cache.parent.mkdir(parents=True)
    foreign = record("S01")  # made on bank_factory's parent, not on this world's base
    ours = foreign.model_copy(update={"source": foreign.source.model_copy(update={"parent": world.model})})
    cache.write_text(ours.model_dump_json() + "\n")
    assert seed_records(world) == [ours]
    cache.write_text(ours.model_dump_json() + "\n" + foreign.model_dump_json() + "\n")
    with pytest.raises(BadInput, match=f"record S01 was made on parent {foreign.source.parent.sha256[:12]}"):
        seed_records(world)


@pytest.mark.slow
def test_test_world_built_with_1_and_2_caller_threads_is_one_world(tmp_path, monkeypatch):
    from agent.world.embedded import ensure_world

    worlds = []
    for n in (1, 2):
        monkeypatch.setenv("AGENT_CACHE", str(tmp_path / f"cache{n}"))
        worlds.append(ensure_world("test", threads=n))
    assert worlds[0].recipe_sha256 == worlds[1].recipe_sha256
    assert worlds[0].model.sha256 == worlds[1].model.sha256
    assert worlds[0].early_model.sha256 == worlds[1].early_model.sha256


def test_compare_refuses_a_changed_cached_world_before_any_episode(tmp_path, monkeypatch, capsys):
    from agent.cli.main import main

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))
    rhash = recipe_sha256(RECIPES["test"])
    world = _cached_world(world_dir("test", rhash), rhash, b"the weights the world was built with")
    (Path(world.base_dir) / "model.safetensors").write_bytes(b"weights built elsewhere")
    config = tmp_path / "test.yaml"
    config.write_text("world: test\n")
    out = tmp_path / "compare"
    argv = ["compare", "--policies", "bcit,validate_all", "--seeds", "1", "--config", str(config), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and world.model.sha256[:12] in err
    assert not out.exists()
