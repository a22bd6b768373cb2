"""agent compare --results: finished episodes survive the machine as small digests, and only count
in a comparison measured in the same conditions (agent/experiments/compare_results.py). The
episodes are test_compare's fake `agent run` subprocess; everything else is the real code."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_compare import fake_run
from agent.experiments import compare as C
from agent.experiments import compare_results as CR
from agent.experiments.episodes import digest, episode_result, read_episode
from agent.experiments.fitted import Fitted
from experience_bank.errors import BadInput

RECORD = "import sys\nopen({calls!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """argv_for of a fake `agent run` that appends each call to a file; returns (argv_for, calls())."""
    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))  # no world is built here
    calls = tmp_path / "calls.txt"
    script = tmp_path / "fake_run.py"
    script.write_text(RECORD.format(calls=str(calls))
                      + fake_run())

    def argv_for(out, p, s, world_seed=None):
        argv = C.episode_argv(out, p, s, budget="10h", config=None, world_seed=world_seed)
        return [sys.executable, str(script)] + argv[argv.index("run") + 1:]

    return argv_for, lambda: calls.read_text().splitlines() if calls.exists() else []


def _numbers(path: Path) -> tuple[dict, list]:
    """compare.json's summary and episodes, less where each episode's record lives on this machine."""
    doc = json.loads(path.read_text())
    return doc["summary"], [{k: v for k, v in e.items() if k not in ("run_dir", "taken_from")} for e in doc["episodes"]]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_second_machine_takes_every_episode_and_runs_none(tmp_path, fake):
    argv_for, calls = fake
    results = tmp_path / "docs" / "compare"
    first = C.compare(tmp_path / "m1", ["good", "idle"], [0, 1], argv_for=argv_for, results=results)
    assert len(calls()) == 4 and first["policies"]["good"]["endpoint_mean"] == pytest.approx(44.0)
    assert sorted(_files(results)) == ["compare.json", "compare.md", "episodes/good-s0.json", "episodes/good-s1.json",
                                       "episodes/idle-s0.json", "episodes/idle-s1.json"]
    kept = json.loads((results / "episodes" / "good-s1.json").read_text())
    assert kept["match"]["policy"] == "good" and kept["match"]["seed"] == 1 and kept["match"]["budget_h"] == 36.0
    assert kept["match"]["library_version"] == 1 and len(kept["match"]["code"]["episode"]) == 64
    assert "run_dir" not in json.dumps(kept)  # nothing of this machine's paths

    # another machine: a fresh --out runs nothing and writes the same numbers
    second = C.compare(tmp_path / "m2", ["good", "idle"], [0, 1], argv_for=argv_for, results=results)
    assert len(calls()) == 4 and second == first
    assert _numbers(tmp_path / "m2" / "compare.json") == _numbers(tmp_path / "m1" / "compare.json")
    taken = json.loads((tmp_path / "m2" / "compare.json").read_text())["episodes"]
    assert [e["taken_from"] for e in taken][0] == str(results / "episodes" / "good-s0.json")
    assert (results / "compare.json").read_text() == (tmp_path / "m2" / "compare.json").read_text()
    assert not (tmp_path / "m2" / "episodes").exists()

    # idle reads its initial adoption scores from good's stored digest: without good-s1 there, it is
    # run again, and idle-s1 (taken) still reads them from the episode run now
    (results / "episodes" / "good-s1.json").unlink()
    third = C.compare(tmp_path / "m3", ["good", "idle"], [0, 1], argv_for=argv_for, results=results)
    assert [c.split()[c.split().index("--policy") + 1:][:3:2] for c in calls()[4:]] == [["good", "1"]]
    assert third == first and (results / "episodes" / "good-s1.json").is_file()


def test_a_stored_episode_of_other_conditions_is_refused_in_one_line_with_nothing_written(tmp_path, fake,
                                                                                         monkeypatch):
    argv_for, calls = fake
    results = tmp_path / "results"
    C.compare(tmp_path / "m1", ["good", "meh"], [0], argv_for=argv_for, results=results)
    before = _files(results)
    config = tmp_path / "other.yaml"
    config.write_text("eval_batch_size: 8\n")
    cases = [({"config": str(config)}, "config_sha256 differ"), ({"budget": "5h"}, "budget_h differ")]
    for kwargs, message in cases:
        with pytest.raises(BadInput, match=message) as exc:
            C.compare(tmp_path / "m2", ["good", "meh"], [0], argv_for=argv_for, results=results, **kwargs)
        assert "\n" not in str(exc.value) and "new --results directory" in str(exc.value)
    monkeypatch.setattr(CR, "code_version", lambda: {"episode": "0" * 64, "libraries": {}})
    with pytest.raises(BadInput, match=r"good-s0.json was measured in other conditions \(code differ\)"):
        C.compare(tmp_path / "m2", ["good", "meh"], [0], argv_for=argv_for, results=results)
    monkeypatch.undo()
    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))
    # the world built here is another one than the episodes' (their manifests name this machine's id, base a...)
    built = SimpleNamespace(recipe_sha256="e" * 64, model=SimpleNamespace(sha256="a" * 64))
    monkeypatch.setattr(CR, "cached_world", lambda size, seed: built)
    with pytest.raises(BadInput, match=r"\(world differ\)"):
        C.compare(tmp_path / "m2", ["good", "meh"], [0], argv_for=argv_for, results=results)
    assert len(calls()) == 2 and not (tmp_path / "m2").exists() and _files(results) == before


def test_a_results_path_that_is_a_file_is_refused_before_any_episode_runs(tmp_path, fake):
    argv_for, calls = fake
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a results directory\n")
    for results in (blocker, blocker / "compare"):
        with pytest.raises(BadInput, match=r"notes.txt is a file, not a directory") as exc:
            C.compare(tmp_path / "m1", ["good", "meh"], [0], argv_for=argv_for, results=results)
        assert "\n" not in str(exc.value)
        with pytest.raises(BadInput, match=r"notes.txt is a file"):
            C.compare_worlds(tmp_path / "m2", ["good", "meh"], [0], [0, 1], argv_for=lambda o, p, s, w: argv_for(o, p, s, w),
                             results=results)
    assert calls() == [] and blocker.read_text() == "a file, not a results directory\n"
    assert not (tmp_path / "m1").exists() and not (tmp_path / "m2").exists()


def test_episodes_stored_on_a_machine_that_rounds_differently_are_refused_before_any_build(tmp_path, fake,
                                                                                           monkeypatch):
    """No world is built here, yet the stored episodes' world id (another numerics fingerprint) is
    told apart at once: nothing is built, nothing runs."""
    from agent.world import embedded

    argv_for, calls = fake
    results = tmp_path / "results"
    C.compare(tmp_path / "m1", ["good", "meh"], [0], argv_for=argv_for, results=results)
    here = embedded.build_env()
    monkeypatch.setattr(embedded, "build_env", lambda: replace(here, numerics="0" * 16))
    with pytest.raises(BadInput, match=r"\(world differ\)"):
        C.compare(tmp_path / "m2", ["good", "meh"], [0], argv_for=argv_for, results=results)
    assert len(calls()) == 2 and not (tmp_path / "m2").exists() and not (tmp_path / "cache" / "worlds").exists()


def test_every_world_is_checked_before_any_runs_and_kept_under_its_own_directory(tmp_path, fake, monkeypatch):
    argv_for, calls = fake
    results = tmp_path / "results"
    first = C.compare_worlds(tmp_path / "m1", ["good", "meh"], [0], [0, 1], argv_for=argv_for, results=results)
    assert len(calls()) == 4 and (results / "world-1" / "episodes" / "meh-s0.json").is_file()
    assert json.loads((results / "world-1" / "episodes" / "meh-s0.json").read_text())["match"]["world_seed"] == 1
    assert {"compare.json", "compare.md", "world-0/compare.json"} <= set(_files(results))
    assert C.compare_worlds(tmp_path / "m2", ["good", "meh"], [0], [0, 1], argv_for=argv_for, results=results) == first
    assert len(calls()) == 4
    # world 1's stored episode is of another budget: refused before world 0 (all stored) or anything runs
    path = results / "world-1" / "episodes" / "good-s0.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc | {"match": doc["match"] | {"budget_h": 5.0}}))
    (results / "world-0" / "episodes" / "meh-s0.json").unlink()
    with pytest.raises(BadInput, match="world-1/episodes/good-s0.json .*budget_h differ"):
        C.compare_worlds(tmp_path / "m3", ["good", "meh"], [0], [0, 1], argv_for=argv_for, results=results)
    assert len(calls()) == 4 and not (tmp_path / "m3").exists()
    path.write_text("{not json")
    with pytest.raises(BadInput, match="is not a stored episode"):
        C.compare_worlds(tmp_path / "m3", ["good", "meh"], [0], [0, 1], argv_for=argv_for, results=results)


def test_a_report_runs_nothing_and_covers_the_seeds_every_policy_has_finished(tmp_path, fake):
    argv_for, calls = fake
    results = tmp_path / "results"
    full = C.compare_worlds(tmp_path / "m1", ["good", "meh"], [0, 1], [0, 1], argv_for=argv_for, results=results)
    assert len(calls()) == 8
    # world 1 is still under way: seed 1 has only good's episode; world 0 has none of seed 1
    (results / "world-1" / "episodes" / "meh-s1.json").unlink()
    for p in ("good", "meh"):
        (results / "world-0" / "episodes" / f"{p}-s1.json").unlink()
    report = C.compare_worlds(tmp_path / "m2", ["good", "meh"], [0, 1], [0, 1], argv_for=argv_for, results=results,
                              report_only=True)
    assert len(calls()) == 8  # nothing ran
    assert {p: s["n"] for p, s in report["policies"].items()} == {"good": 2, "meh": 2}  # (w0, s0) and (w1, s0)
    assert report["per_world"]["1"]["policies"]["good"]["n"] == 1 and full["policies"]["good"]["n"] == 4
    # the fake's endpoint is 40 + gain + seed - 0.5: seed 0 only (43.5) against seeds 0 and 1 (44.0)
    assert report["policies"]["good"]["endpoint_mean"] == pytest.approx(43.5)
    assert full["policies"]["good"]["endpoint_mean"] == pytest.approx(44.0)
    doc = json.loads((results / "compare.json").read_text())  # the results' tables are the report's
    assert "A measurement under way" in (results / "compare.md").read_text()
    assert doc["meta"]["finished"] == [["world-0", 2, 4, True], ["world-1", 3, 4, True]]  # of 2 policies x 2 seeds each
    assert "Finished so far: world-0, 2 of 4 episodes; world-1, 3 of 4 episodes." in (results / "compare.md").read_text()
    assert doc["meta"]["seeds"] == [0] and [e["unit"] for e in doc["episodes"]] == ["w0-s0", "w0-s0", "w1-s0", "w1-s0"]
    # a world with no paired seed is left out of the tables, and its episodes still counted; none anywhere
    # is one line of BadInput
    (results / "world-0" / "episodes" / "meh-s0.json").unlink()
    only = C.compare_worlds(tmp_path / "m3", ["good", "meh"], [0, 1], [0, 1], argv_for=argv_for, results=results,
                            report_only=True)
    assert list(only["per_world"]) == ["1"] and len(calls()) == 8
    assert json.loads((results / "compare.json").read_text())["meta"]["finished"] == [
        ["world-0", 1, 4, False], ["world-1", 3, 4, True]]
    assert ("Finished so far: world-0, 1 of 4 episodes (no seed with every policy yet: not in these tables); "
            "world-1, 3 of 4 episodes.") in (results / "compare.md").read_text()
    (results / "world-0" / "episodes" / "good-s0.json").unlink()
    (results / "world-1" / "episodes" / "meh-s0.json").unlink()
    with pytest.raises(BadInput, match="no world has a seed with all 2 policies finished"):
        C.compare_worlds(tmp_path / "m4", ["good", "meh"], [0, 1], [0, 1], argv_for=argv_for, results=results,
                         report_only=True)
    with pytest.raises(BadInput, match="pass --results"):
        C.compare(tmp_path / "m5", ["good", "meh"], [0], argv_for=argv_for, report_only=True)
    assert len(calls()) == 8


def test_a_report_pairs_two_policies_over_every_seed_both_finished(tmp_path, fake):
    """While the policies that train most are still to run, the cheap ones' finished seeds are paired
    on their own (pairs_so_far), beside the tables over the seeds every policy finished."""
    argv_for, calls = fake
    results = tmp_path / "results"
    C.compare_worlds(tmp_path / "m1", ["good", "meh", "idle"], [0, 1], [0, 1], argv_for=argv_for, results=results)
    assert len(calls()) == 12
    for name in ("world-0/episodes/idle-s1.json", "world-1/episodes/idle-s0.json", "world-1/episodes/idle-s1.json"):
        (results / name).unlink()
    report = C.compare_worlds(tmp_path / "m2", ["good", "meh", "idle"], [0, 1], [0, 1], argv_for=argv_for,
                              results=results, report_only=True)
    assert len(calls()) == 12 and list(report["per_world"]) == ["0"]  # world 1 has no seed with idle
    assert report["pairs"]["good_vs_meh"]["endpoint"]["seeds"] == ["w0-s0"]
    so_far = report["pairs_so_far"]["pairs"]
    assert so_far["good_vs_meh"]["endpoint"]["seeds"] == ["w0-s0", "w0-s1", "w1-s0", "w1-s1"]
    # the fake's gains: good 4 + seed, meh 1 + seed, idle 0 + seed (test_compare.fake_run)
    assert so_far["good_vs_meh"]["endpoint"]["diffs"] == pytest.approx([3.0] * 4)
    assert so_far["good_vs_meh"]["endpoint"]["sign_flip_p"] == pytest.approx(0.125)  # 2 of 16 sign patterns
    assert so_far["good_vs_idle"]["endpoint"]["seeds"] == ["w0-s0"]
    text = (results / "compare.md").read_text()
    assert "## Per pair so far" in text and "| good_vs_meh | 4 | 3.00 |" in text
    assert json.loads((results / "compare.json").read_text())["summary"]["pairs_so_far"]["pairs"] == json.loads(
        json.dumps(so_far))
    assert report["pairs_so_far"]["mismatches"] == {} and "Not properly paired" not in text


def test_pairs_so_far_name_the_units_whose_episodes_read_other_records_and_pair_without_them(tmp_path, fake):
    """Episodes of one unit that read different library records (one world's seed bank built on two
    machines) are not properly paired: the report says which units and values, and pairs again
    without them."""
    argv_for, _ = fake
    results = tmp_path / "results"
    C.compare_worlds(tmp_path / "m1", ["good", "meh", "idle"], [0, 1], [0, 1], argv_for=argv_for, results=results)
    (results / "world-1/episodes/idle-s1.json").unlink()
    path = results / "world-0/episodes/meh-s1.json"
    doc = json.loads(path.read_text())
    doc["digest"]["pairing"]["candidates_sha256"] = "f" * 64  # meh's bank on another machine
    path.write_text(json.dumps(doc))
    report = C.compare_worlds(tmp_path / "m2", ["good", "meh", "idle"], [0, 1], [0, 1], argv_for=argv_for,
                              results=results, report_only=True)
    so_far = report["pairs_so_far"]
    assert list(so_far["mismatches"]) == ["w0-s1"]
    assert so_far["mismatches"]["w0-s1"]["candidates_sha256"]["meh"] == "f" * 64
    assert so_far["pairs"]["good_vs_meh"]["unpaired"] == {"w0-s1": ["candidates_sha256"]}
    assert so_far["pairs"]["good_vs_meh"]["endpoint"]["seeds"] == ["w0-s0", "w0-s1", "w1-s0", "w1-s1"]
    assert so_far["strict"]["good_vs_meh"]["endpoint"]["seeds"] == ["w0-s0", "w1-s0", "w1-s1"]
    assert so_far["strict"]["good_vs_idle"]["endpoint"]["seeds"] == ["w0-s0", "w0-s1", "w1-s0"]  # idle's agree
    assert so_far["pairs"]["good_vs_idle"]["unpaired"] == {}
    text = (results / "compare.md").read_text()
    assert "| good_vs_meh | 4 | 3.00 |" in text and "| good_vs_meh | 3 | 3.00 |" in text
    assert re.search(rf"- w0-s1: candidates_sha256 \w{{12}} \(good, idle\) / {'f' * 12} \(meh\)\n", text)
    assert "Pairing (manifest values equal" in text and "**MISMATCH**" in text  # w0-s1 is in the tables too


def test_a_report_takes_episodes_at_the_code_they_ran_but_never_two_codes_in_one_table(tmp_path, fake, monkeypatch):
    """A measurement spread over sessions runs at one commit while the checkout moves on: a report
    from the newer checkout takes its episodes at the code they ran (named in compare.md), a resume
    from it refuses them, and episodes of two code versions are never pooled."""
    argv_for, calls = fake
    results = tmp_path / "results"
    C.compare_worlds(tmp_path / "m1", ["good", "meh"], [0], [0, 1], argv_for=argv_for, results=results)
    then = json.loads((results / "world-0" / "episodes" / "good-s0.json").read_text())["match"]["code"]
    monkeypatch.setattr(CR, "code_version", lambda: {"episode": "f" * 64, "libraries": {}})
    with pytest.raises(BadInput, match=r"\(code differ\)"):
        C.compare_worlds(tmp_path / "m2", ["good", "meh"], [0], [0, 1], argv_for=argv_for, results=results)
    report = C.compare_worlds(tmp_path / "m3", ["good", "meh"], [0], [0, 1], argv_for=argv_for, results=results,
                              report_only=True)
    assert report["policies"]["good"]["n"] == 2 and len(calls()) == 4
    doc = json.loads((results / "compare.json").read_text())
    assert doc["meta"]["measured_code"] == then and then["episode"] != "f" * 64
    assert f"episode code {then['episode'][:12]}" in (results / "compare.md").read_text()
    path = results / "world-1" / "episodes" / "meh-s0.json"
    other = json.loads(path.read_text())
    path.write_text(json.dumps(other | {"match": other["match"] | {"code": {"episode": "e" * 64, "libraries": {}}}}))
    with pytest.raises(BadInput, match="measured at 2 code versions"):
        C.compare_worlds(tmp_path / "m4", ["good", "meh"], [0], [0, 1], argv_for=argv_for, results=results,
                         report_only=True)
    assert len(calls()) == 4


def test_a_stored_digest_reads_as_its_run_directory(tmp_path):
    """The loop's own run directory (nodes + report over boundary fakes), kept and taken back."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from support.graph_fakes import run_fake

    run_dir = tmp_path / "run"
    run_fake(run_dir)
    d = digest(run_dir)
    keep = CR.Keep(tmp_path / "results", {"policy": "bcit", "seed": 0})
    CR.publish(keep, "bcit-s0", d)
    back = CR.take(keep.results, {"bcit-s0": keep.match})["bcit-s0"]["digest"]
    assert back == json.loads(json.dumps(d))
    assert episode_result(back) | {"run_dir": str(run_dir)} == read_episode(run_dir)
    assert read_episode(run_dir)["promotions"] == sum(e["outcome"] == "promoted" for e in back["events"]) > 0


def test_the_fitted_models_travel_with_the_results_and_are_matched_by_their_bytes(tmp_path, fake):
    """A comparison resumed elsewhere runs with the models its stored episodes ran with (here kept
    in DIR, so nothing is fitted), and episodes of other models are not taken."""
    argv_for, calls = fake
    results = tmp_path / "results"
    results.mkdir()
    (results / "extrapolation.json").write_text('{"x": 1}')
    (results / "fitted.json").write_text("{}")
    fit = C.Fit(sources=(), config_world_seed=0)  # no source: fitting anything would be refused
    C.compare(tmp_path / "m1", ["good", "meh"], [0], argv_for=argv_for, results=results, fit=fit)
    assert (tmp_path / "m1" / "extrapolation.json").read_text() == '{"x": 1}'
    assert json.loads((results / "episodes" / "good-s0.json").read_text())["match"]["models"] == {
        "extrapolation-model": hashlib.sha256(b'{"x": 1}').hexdigest()}
    C.compare(tmp_path / "m2", ["good", "meh"], [0], argv_for=argv_for, results=results, fit=fit)
    assert len(calls()) == 2
    (results / "extrapolation.json").write_text('{"x": 2}')
    with pytest.raises(BadInput, match=r"\(models differ\)"):
        C.compare(tmp_path / "m3", ["good", "meh"], [0], argv_for=argv_for, results=results, fit=fit)
    with pytest.raises(BadInput, match="m1/extrapolation.json differs from"):  # --out ran with other models
        C.compare(tmp_path / "m1", ["good", "meh"], [0], argv_for=argv_for, results=results, fit=fit)
    assert len(calls()) == 2


def test_the_models_an_episode_is_handed_are_matched_by_their_bytes(tmp_path):
    (tmp_path / "g.json").write_text("g")
    (tmp_path / "x.json").write_text("x")
    fitted = Fitted(tmp_path / "g.json", tmp_path / "x.json")
    assert set(fitted.sha256s("bcit_predictive")) == {"gonogo-model", "extrapolation-model"}
    assert list(fitted.sha256s("bcit")) == ["extrapolation-model"]
    assert fitted.sha256s("bcit")["extrapolation-model"] == fitted.sha256s("bcit_predictive")["extrapolation-model"]


def test_code_version_covers_every_module_an_episode_imports_but_its_presentation():
    import subprocess, sys  # noqa: E401,PLC0415 (a fresh interpreter: this one has imported every test's modules)

    root = Path(__file__).resolve().parents[1]
    code = ("import sys, pathlib; import agent.cli.main, agent.cli.run, agent.loop.episode, agent.loop.graph; "
            "root = pathlib.Path.cwd().resolve(); "
            "print('\\n'.join(sorted({pathlib.Path(m.__file__).resolve().relative_to(root).as_posix() "
            "for m in list(sys.modules.values()) if getattr(m, '__file__', None) "
            "and pathlib.Path(m.__file__).resolve().is_relative_to(root / 'agent')})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    imported = [p for p in out.split() if p.endswith(".py")]
    covered = CR.EPISODE_CODE + CR.PRESENTATION + CR.REGISTERED_ONLY
    assert imported and [p for p in imported if not any(p == c or p.startswith(c + "/") for c in covered)] == []
    assert not any(p.startswith("agent/experiments/") for p in imported)  # so it may stay out of the version


def test_a_report_reads_the_models_its_results_keep_without_fit_from(tmp_path, fake):
    """`agent compare --report` needs no --fit-from: the results directory keeps the models its
    episodes ran with, and the report matches the episodes against those."""
    argv_for, calls = fake
    results = tmp_path / "results"
    results.mkdir()
    (results / "extrapolation.json").write_text('{"x": 1}')
    (results / "fitted.json").write_text('{"source_world_seeds": [1, 2]}')
    C.compare(tmp_path / "m1", ["good", "meh"], [0], argv_for=argv_for, results=results,
              fit=C.Fit(sources=(), config_world_seed=0))
    report = C.compare(tmp_path / "m2", ["good", "meh"], [0], argv_for=argv_for, results=results, report_only=True)
    assert len(calls()) == 2 and report["policies"]["good"]["n"] == 1
    assert not (tmp_path / "m2" / "extrapolation.json").exists()  # read where it is kept, not copied
    # and the report names what they were fitted on, from the same place
    assert json.loads((tmp_path / "m2" / "compare.json").read_text())["meta"]["fitted"] == {"source_world_seeds": [1, 2]}
    assert "world 0: fitted on world seeds [1, 2]" in (tmp_path / "m2" / "compare.md").read_text()
    (results / "extrapolation.json").write_text('{"x": 2}')  # not the models the episodes ran with
    with pytest.raises(BadInput, match=r"\(models differ\)"):
        C.compare(tmp_path / "m3", ["good", "meh"], [0], argv_for=argv_for, results=results, report_only=True)


def test_the_report_command_does_not_ask_for_a_go_no_go_model(tmp_path, monkeypatch, capsys):
    """Without --fit-from, `agent compare --report` of bcit_predictive gets past the model check
    (here it stops at the empty results directory: no pair to report)."""
    from agent.cli.main import main  # noqa: PLC0415

    monkeypatch.setenv("AGENT_CACHE", str(tmp_path / "cache"))
    argv = ["compare", "--policies", "bcit,bcit_predictive", "--seeds", "1", "--out", str(tmp_path / "o"),
            "--results", str(tmp_path / "r")]
    assert main(argv) == 2 and "needs a fitted go/no-go model" in capsys.readouterr().err
    assert main(argv + ["--report"]) == 2  # no results directory yet: one line, before any progress
    assert capsys.readouterr().err.splitlines() == [
        f"agent: error: --results {tmp_path / 'r'} is no directory, so there are no finished episodes to report: "
        "pass the --results DIR a comparison wrote"]
    (tmp_path / "r").mkdir()
    assert main(argv + ["--report"]) == 2
    err = capsys.readouterr().err
    assert "needs a fitted go/no-go model" not in err and "no pair to report" in err


def test_every_command_module_is_episode_code_or_registered_only_and_run_imports_none_of_the_latter():
    """REGISTERED_ONLY and EVALUATION_ONLY stay out of the episode code version; that holds only while
    `agent run`'s own code imports none of those modules, even inside a function (an excluded module
    may import episode code, never the reverse)."""
    import ast  # noqa: PLC0415

    root = Path(__file__).resolve().parents[1]
    cli = sorted(p.relative_to(root).as_posix() for p in (root / "agent" / "cli").glob("*.py"))
    assert sorted(set(CR.EPISODE_CODE + CR.REGISTERED_ONLY) & set(cli)) == cli
    assert not set(CR.EPISODE_CODE) & set(CR.REGISTERED_ONLY)
    banned = {p.removesuffix(".py").replace("/", ".") for p in CR.REGISTERED_ONLY + CR.EVALUATION_ONLY}
    files = [f for part in CR.EPISODE_CODE for f in ((root / part).rglob("*.py") if (root / part).is_dir() else [root / part])
             if f.relative_to(root).as_posix() not in CR.EVALUATION_ONLY]
    found = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) else [])
            found += [f"{f.relative_to(root)}: {n}" for n in names if n in banned]
    assert len(files) > 100 and found == []


def test_a_comparison_directory_holds_one_code_s_episodes(tmp_path, fake, monkeypatch):
    """A finished run directory in --out is taken as done and kept with the current conditions, so
    --out is stamped with the code its episodes ran at and another code is refused before anything
    runs (else the old episodes would be published as the new code's)."""
    argv_for, calls = fake
    C.compare(tmp_path / "m1", ["good", "meh"], [0], argv_for=argv_for, results=tmp_path / "r1")
    stamp = json.loads((tmp_path / "m1" / CR.OUT_CODE).read_text())
    assert stamp == CR.code_version() and len(calls()) == 2
    monkeypatch.setattr(CR, "code_version", lambda: {"episode": "f" * 64, "libraries": {}})
    with pytest.raises(BadInput, match=f"holds episodes run at episode code {stamp['episode'][:12]}, not .* ffffffffffff"):
        C.compare(tmp_path / "m1", ["good", "meh"], [0], argv_for=argv_for, results=tmp_path / "r2")
    assert not (tmp_path / "r2" / "episodes").exists() and len(calls()) == 2
    assert json.loads((tmp_path / "m1" / CR.OUT_CODE).read_text()) == stamp  # left as it was
    # with --world-seeds, one world of another code stamps none of the others
    (tmp_path / "m3" / "world-1").mkdir(parents=True)
    (tmp_path / "m3" / "world-1" / CR.OUT_CODE).write_text(json.dumps(stamp))
    with pytest.raises(BadInput, match="m3/world-1 holds episodes run at"):
        C.compare_worlds(tmp_path / "m3", ["good", "meh"], [0], [0, 1], argv_for=argv_for, results=tmp_path / "r3")
    assert not (tmp_path / "m3" / "world-0").exists() and len(calls()) == 2
    C.compare(tmp_path / "m2", ["good", "meh"], [0], argv_for=argv_for, results=tmp_path / "r2")  # a new --out runs
    assert len(calls()) == 4
    (tmp_path / "m2" / CR.OUT_CODE).write_text("{not json")
    with pytest.raises(BadInput, match="comparison code stamp .*code.json"):
        C.compare(tmp_path / "m2", ["good", "meh"], [0], argv_for=argv_for, results=tmp_path / "r2")


def test_a_results_directory_whose_episodes_are_not_files_is_refused_before_anything_runs(tmp_path, fake):
    """An `episodes` that is a file would fail only when the first episode is kept, hours in; a
    digest that is a folder was taken as never run."""
    argv_for, calls = fake
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "episodes").write_text("x")
    with pytest.raises(BadInput, match="r1/episodes: .*r1/episodes is a file, not a directory"):
        C.compare(tmp_path / "m1", ["good", "meh"], [0], argv_for=argv_for, results=tmp_path / "r1")
    (tmp_path / "r2" / "episodes" / "good-s0.json").mkdir(parents=True)
    with pytest.raises(BadInput, match="good-s0.json is not a stored episode"):
        C.compare(tmp_path / "m2", ["good", "meh"], [0], argv_for=argv_for, results=tmp_path / "r2")
    assert calls() == [] and not (tmp_path / "m1").exists() and not (tmp_path / "m2").exists()


def test_the_episode_code_version_leaves_out_exactly_the_evaluation_only_files():
    """The version hashes every other source of EPISODE_CODE: dropping an evaluation-only file from the
    exclusion changes it, and each excluded file is one that exists (a renamed one would silently count)."""
    from experience_bank.runcache import source_version  # noqa: PLC0415

    root = Path(__file__).resolve().parents[1]
    assert all((root / f).is_file() for f in CR.EVALUATION_ONLY)
    version = CR.code_version()["episode"]
    assert version == source_version(CR.EPISODE_CODE, CR.EVALUATION_ONLY)
    assert version != source_version(CR.EPISODE_CODE)
    assert version != source_version(CR.EPISODE_CODE, CR.EVALUATION_ONLY[1:])


def test_an_episode_that_will_not_pair_with_its_seeds_stored_ones_is_said_when_it_ends(tmp_path, fake, capsys):
    """A seed's episodes run on two machines (its seed bank built on each) will not pair: the first one
    that shows it is named as it ends, before the seed's other episodes spend hours."""
    argv_for, calls = fake
    results = tmp_path / "results"
    C.compare(tmp_path / "m1", ["good", "meh"], [0, 1], argv_for=argv_for, results=results)
    path = results / "episodes" / "meh-s1.json"
    doc = json.loads(path.read_text())
    doc["digest"]["pairing"]["candidates_sha256"] = "f" * 64  # meh's seed 1 ran beside another machine's bank
    path.write_text(json.dumps(doc))
    for name in ("good-s0", "good-s1"):
        (results / "episodes" / f"{name}.json").unlink()
    capsys.readouterr()
    C.compare(tmp_path / "m2", ["good", "meh"], [0, 1], argv_for=argv_for, results=results)
    assert len(calls()) == 6
    warned = [line for line in capsys.readouterr().err.splitlines() if "not properly paired" in line]
    assert len(warned) == 1 and "good-s1 is not properly paired with meh-s1 (candidates_sha256 differ;" in warned[0]
    # the short policies run by one command, the rest by another: the check reads every stored episode
    (results / "episodes" / "good-s1.json").unlink()
    C.compare(tmp_path / "m3", ["good"], [0, 1], argv_for=argv_for, results=results)
    warned = [line for line in capsys.readouterr().err.splitlines() if "not properly paired" in line]
    assert len(warned) == 1 and "good-s1 is not properly paired with meh-s1 (" in warned[0]
