"""agent compare: pure aggregation (compare_stats) on hand-checkable episodes; the runner on a fake `agent run`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent.experiments import compare as C
from experience_bank.errors import BadInput
from agent.experiments import compare_stats as S
from agent.experiments.episodes import cause, endpoint_mean, read_episode


def _ep(policy, seed, sql, fin=None, traj=None, **kw):
    endpoint = {"sql": sql} | ({"finance": fin} if fin is not None else {})
    fams = sorted(endpoint)
    return {"policy": policy, "seed": seed, "status": "done", "families": fams, "budget_h": 10.0,
            "endpoint": endpoint, "endpoint_adoption": {f: v + 1.0 for f, v in endpoint.items()},
            "initial": {f: 40.0 for f in fams},
            "ifeval": {"ifeval.prompt_strict": 70.0, "ifeval.inst_strict": 80.0},
            "ifeval_adoption": {"ifeval.prompt_strict": 69.0, "ifeval.inst_strict": 80.0},
            "ifeval_initial": {"ifeval.prompt_strict": 71.0, "ifeval.inst_strict": 80.0},
            "promotions": kw.get("promotions", 1), "promoted": kw.get("promoted", []),
            "authorizations": kw.get("authorizations", 2),
            "decisions": 3, "wasted_h": kw.get("wasted_h", 1.0), "spent_h": 5.0,
            "trajectory": traj or [[0.0, {f: 40.0 for f in fams}], [5.0, endpoint]],
            "pairing": {"library_version": 1, "candidates_sha256": "c", "budget_device_hours": 10.0,
                        "initial.sha256": "x"}}


def test_trajectory_auc_is_the_time_average_over_the_budget():
    ep = _ep("a", 0, 50.0, traj=[[0.0, {"sql": 40.0}], [4.0, {"sql": 40.0}], [6.0, {"sql": 50.0}]])
    assert S.trajectory_auc(ep) == pytest.approx((40 * 6 + 50 * 4) / 10)


def test_endpoint_mean_over_target_capabilities():
    assert endpoint_mean(_ep("a", 0, 50.0, fin=30.0)) == 40.0


def test_summarise_hand_checked():
    eps = [_ep("a", s, v) for s, v in enumerate([42.0, 44.0, 46.0])]
    eps += [_ep("b", s, v, wasted_h=w) for s, (v, w) in enumerate([(40.0, 2.0), (41.0, 3.0), (42.0, 4.0)])]
    eps.append({"policy": "b", "seed": 3, "status": "failed", "error": "exit 1"})
    s = S.summarise(eps)
    a = s["policies"]["a"]
    assert a["n"] == 3 and a["endpoint_mean"] == pytest.approx(44.0) and a["endpoint_sd"] == pytest.approx(2.0)
    assert a["promotions"] == 3 and a["authorizations"] == 6 and a["promotion_rate"] == 0.5
    assert a["endpoint_adoption_mean"] == pytest.approx(45.0)
    # read on adoption, where the initial parent was scored too: 69 - 71
    assert a["ifeval_drop_vs_initial"]["ifeval.prompt_strict"] == pytest.approx(-2.0)
    pair = s["pairs"]["a_vs_b"]["endpoint"]
    assert pair["diffs"] == [2.0, 3.0, 4.0] and pair["mean_diff"] == pytest.approx(3.0)
    # all three differences positive: 2 of 2^3 sign assignments are as extreme -> p = 0.25
    assert pair["sign_flip_p"] == pytest.approx(0.25)
    # sd of the differences 1, t(0.975, 2) = 4.302653
    assert pair["ci95"] == pytest.approx([3 - 4.302653 / 3 ** 0.5, 3 + 4.302653 / 3 ** 0.5], abs=1e-5)
    assert s["pairs"]["a_vs_b"]["wasted_h"]["mean_diff"] == pytest.approx(-2.0)
    assert s["failed"] == [{"policy": "b", "seed": 3, "status": "failed", "error": "exit 1"}]
    assert s["pairing"]["paired"]


def test_ahead_counts_per_pair_and_ahead_of_every_other_policy_over_the_pairs_all_finished():
    # seed 0: a 45 > b 44 > c 40; seed 1: a 41 = b 41 > c 40; seed 2: c 46 > a 42 > b 41; c has no seed 3
    eps = [_ep("a", s, v) for s, v in enumerate([45.0, 41.0, 42.0, 50.0])]
    eps += [_ep("b", s, v) for s, v in enumerate([44.0, 41.0, 41.0, 39.0])]
    eps += [_ep("c", s, v) for s, v in enumerate([40.0, 40.0, 46.0])]
    s = S.summarise(eps)
    ab, ac = s["pairs"]["a_vs_b"]["endpoint"], s["pairs"]["a_vs_c"]["endpoint"]
    assert (ab["ahead"], ab["tied"], ab["behind"]) == (3, 1, 0)  # seed 3 counts: a and b both have it
    assert (ac["ahead"], ac["tied"], ac["behind"]) == (2, 0, 1)
    # strictly above both others: a on seed 0 only (tied with b on seed 1), c on seed 2; seed 3 lacks c
    assert s["ahead_of_all"] == {"units": 3, "per_policy": {"a": 1, "b": 0, "c": 1}}
    from agent.experiments.compare_output import markdown
    md = markdown(s, {"seeds": [0, 1, 2, 3], "budget": "10h", "config": None, "wall_s": 1.0})
    assert "of the 3 pairs every policy finished: a 1; b 0; c 1." in md
    assert "| a_vs_b | 4 | 3.25 |" in md and "| 3/1/0 |" in md


def test_where_a_policy_falls_behind_names_the_cards_the_policies_ahead_promoted_and_it_did_not():
    # seed 0: a 45 (S1, S2) > b 44 (S1) > c 40 (none); seed 1: c 46 (S3) > a 42 (S1) = b 42 (S1); seed 2: b only
    eps = [_ep("a", 0, 45.0, promoted=["S1", "S2"]), _ep("a", 1, 42.0, promoted=["S1"])]
    eps += [_ep("b", 0, 44.0, promoted=["S1"]), _ep("b", 1, 42.0, promoted=["S1"]), _ep("b", 2, 50.0)]
    eps += [_ep("c", 0, 40.0), _ep("c", 1, 46.0, promoted=["S3"])]
    behind = S.summarise(eps)["falls_behind"]
    assert behind["a"] == {"units": 2, "behind": 1, "mean_gap_pp": pytest.approx(4.0), "missed": {"S3": 1}}
    assert behind["b"] == {"units": 2, "behind": 2, "mean_gap_pp": pytest.approx(2.5), "missed": {"S2": 1, "S3": 1}}
    assert behind["c"] == {"units": 2, "behind": 1, "mean_gap_pp": pytest.approx(5.0), "missed": {"S1": 1, "S2": 1}}
    from agent.experiments.compare_output import markdown
    md = markdown(S.summarise(eps), {"seeds": [0, 1, 2], "budget": "10h", "config": None, "wall_s": 1.0})
    assert "| b | 2 of 2 | 2.50 | S2, S3 |" in md and "| c | 1 of 2 | 5.00 | S1, S2 |" in md


def test_pairing_check_names_the_mismatch():
    eps = [_ep("a", 0, 40.0), _ep("b", 0, 40.0)]
    eps[1]["pairing"]["library_version"] = 2
    check = S.pairing_check(eps)
    assert not check["paired"] and check["mismatches"]["0"]["library_version"] == {"a": 1, "b": 2}


def test_identical_differences_give_a_zero_width_interval():
    eps = [_ep("a", s, 41.0) for s in range(2)] + [_ep("b", s, 40.0) for s in range(2)]
    pair = S.summarise(eps)["pairs"]["a_vs_b"]["endpoint"]
    assert pair["ci95"] == [1.0, 1.0] and pair["sign_flip_p"] == pytest.approx(0.5)


# --- a fake `agent run` that writes an episode directory in the loop's format ----------------

FAKE_RUN = r'''
import json, sys
TESTS = {tests!r}
from pathlib import Path
args = sys.argv[1:]
policy, seed = args[args.index("--policy") + 1], int(args[args.index("--seed") + 1])
run_dir = Path(args[args.index("--out") + 1] if "--out" in args else args[args.index("--resume") + 1])
if policy == "broken":
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_text("{}")  # started, then crashed: the next call resumes it
    sys.exit("broken policy: simulated crash")
gain = {"good": 4.0, "meh": 1.0, "idle": 0.0}[policy] + seed
sys.path.insert(0, TESTS)
from support import bank_factory as bf
from support.graph_fakes import _suite
from agent.run.rundir import RunDir
from experience_bank.results import GateCheck, GateVerdict
for sha, v in (("a" * 64, 40.0), ("b" * 64, 40.0 + gain)):
    ife = _suite("ifeval", "prompt_strict", 70.0, sha, "adoption")
    ife = ife.model_copy(update={"metrics": {"prompt_strict": 70.0, "inst_strict": 80.0}})
    if policy == "idle":  # rejects everything: no gate, so nothing is scored on adoption
        RunDir(run_dir).write_evaluation(sha, "test", {"sql/target": _suite("sql/target", "exec_acc", v - 0.5, sha,
                                                                            "test"), "ifeval": ife}, 1.0)
        break
    RunDir(run_dir).write_evaluation(sha, "adoption", {"sql/target": _suite("sql/target", "exec_acc", v, sha, "adoption"),
                                                       "ifeval": ife}, 1.0)
    # the endpoint: held-out test scores, here half a point under adoption
    RunDir(run_dir).write_evaluation(sha, "test", {"sql/target": _suite("sql/target", "exec_acc", v - 0.5, sha, "test"),
                                                   "ifeval": ife}, 1.0)
from experience_bank.bank import Bank
from experience_bank.decisions import Event
def ev(seq, card, action, outcome, cost):
    return Event(episode_id=run_dir.name, seq=seq, candidate_id=card, decision=bf.decision(card, action),
                 action=action, cost_device_hours=cost, wall_seconds=1.0, metrics={}, outcome=outcome, reason="",
                 full_run=None if action == "reject" else "ran")
bank_path = run_dir.parent / f"{run_dir.name}.sqlite"
with Bank.init(bank_path) as bank:
    bank.start_episode(run_dir.name, "f" * 64, 0)
    events = [ev(0, "S01", "train", "rolled_back", 3.0), ev(1, "S02", "reject", "rejected", 0.0),
              ev(2, "S03", "train", "promoted", 2.0)]
    if policy == "idle":
        events = [ev(0, "S01", "reject", "rejected", 0.0), ev(1, "S02", "reject", "rejected", 0.0)]
    for e in events:
        bank.append_event(e)
if policy != "idle":
    step = run_dir / "steps" / events[2].decision.decision_hash[:16]
    step.mkdir(parents=True)
    (step / "verdict.json").write_text(GateVerdict(
        promote=True, decided_by="all_passed", checks=(GateCheck(name="target", passed=True, numbers={}, reason="ok"),),
        u_prom=0.1, child_sha256="b" * 64, parent_sha256="a" * 64, initial_sha256="a" * 64).model_dump_json())
from agent.config import RunConfig
from agent.run.manifest import Evaluators, ModelAt, WorldId, build_manifest
# the id `agent run` freezes: the default world's at the world seed asked for, on this machine
world_id = {world_ids!r}[int(args[args.index("--world-seed") + 1]) if "--world-seed" in args else 0]
from agent.run.rundir import RunDir
RunDir(run_dir).freeze(build_manifest(
    episode_id=run_dir.name, config=RunConfig(policy="bcit", bank=str(bank_path)),
    budget_h=10.0, initial=ModelAt(dir="base", sha256="a" * 64),
    world=WorldId(size="default", recipe_sha256=world_id, chat_template_sha256="d" * 64), library_version=1,
    candidate_hashes=[], evaluators=Evaluators(suites=("sql/target",), eval_protocol="fake", backend="transformers",
                                               n=1, batch_size=1, seed=0), datasets={}, allowlist={}))
(run_dir / "report.md").write_text("done")
'''


def fake_run(text: str = FAKE_RUN) -> str:
    """A fake `agent run` script's text (FAKE_RUN or a variant): the tests' folder and the world ids
    the real command would freeze here, computed once in this process so that no fake run imports
    torch to compute them."""
    from agent.world.embedded import recipe_for, recipe_sha256  # noqa: PLC0415

    ids = {ws: recipe_sha256(recipe_for("default", ws)) for ws in range(4)}
    return text.replace("{tests!r}", repr(str(Path(__file__).parent))).replace("{world_ids!r}", repr(ids))


def test_runner_isolates_a_failing_job_and_resumes(tmp_path, capsys):
    script = tmp_path / "fake_run.py"
    script.write_text(fake_run())
    calls = []

    def argv_for(out, p, s):
        calls.append((p, s))
        argv = C.episode_argv(out, p, s, budget="10h", config=None)
        return [sys.executable, str(script)] + argv[argv.index("run") + 1:]

    out = tmp_path / "cmp"
    summary = C.compare(out, ["good", "meh", "broken"], [0, 1], n_jobs=2, argv_for=argv_for)
    assert [(f["policy"], f["seed"]) for f in summary["failed"]] == [("broken", 0), ("broken", 1)]
    good = summary["policies"]["good"]
    assert good["n"] == 2 and good["endpoint_mean"] == pytest.approx(44.0)
    assert good["endpoint_adoption_mean"] == pytest.approx(44.5)  # kept beside: the split the gate read
    assert good["wasted_h"] == 3.0 and good["promotions"] == 2 and good["authorizations"] == 4
    # AUC: 40 for the first 3 h, 40 until 5 h (rollback), then 40 + gain for the remaining 5 h
    assert good["trajectory_auc"] == pytest.approx((40 * 5 + 44.5 * 5) / 10)
    assert summary["pairs"]["good_vs_meh"]["endpoint"]["diffs"] == [3.0, 3.0]
    for name in ("compare.md", "compare.json", "endpoint.png", "trajectories.png"):
        assert (out / name).exists()
    assert json.loads((out / "jobs" / "broken-s0.json").read_text())["status"] == "failed"
    assert "MISMATCH" not in (out / "compare.md").read_text()
    # progress on stderr: the plan, then one line per episode as it ends, with the time left
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"[compare] {out}: 6 episodes, 0 finished before, 6 to run"
    ended = [line for line in lines if " episodes ended " in line]
    assert [line.split(": ")[1].split(" episodes")[0] for line in ended] == [f"{k}/6" for k in range(1, 7)]
    assert sum("broken-s0: failed in " in line for line in ended) == 1
    assert all("at the pace so far" in line for line in ended[:-1]) and "to run" not in ended[-1]
    # a second call skips the finished episodes and resumes the unfinished (failed) ones
    first = (out / "episodes" / "good-s0" / "report.md").stat().st_mtime_ns
    C.compare(out, ["good", "meh", "broken"], [0, 1], n_jobs=2, argv_for=argv_for)
    again = [line for line in capsys.readouterr().err.splitlines() if " episodes ended " in line]
    assert sum("(good-s1: done)" in line for line in again) == 1  # skipped: no wall time of its own
    assert (out / "episodes" / "good-s0" / "report.md").stat().st_mtime_ns == first
    resumed = C.episode_argv(out, "broken", 0, budget=None, config=None)
    assert "--resume" in resumed and "--out" not in resumed


def test_cli_rejects_unknown_policy(capsys):
    from agent.cli.main import main

    assert main(["compare", "--policies", "bcit,nope", "--seeds", "2"]) == 2
    assert "unknown" in capsys.readouterr().err


def test_cli_refuses_a_policy_named_twice_before_any_episode(tmp_path, capsys):
    """Named twice, a policy would run each episode twice and be paired against itself."""
    from agent.cli.main import main

    out = tmp_path / "cmp"
    assert main(["compare", "--policies", "bcit,no_memory,bcit", "--seeds", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bcit more than once" in err and err.count("\n") == 1
    assert not out.exists()


def test_cli_accepts_every_baseline_by_name(capsys):
    """The policy names pass the check (the next check, on --seeds, is the one that refuses)."""
    from agent.cli.main import main

    assert main(["compare", "--policies", "bcit,successive_halving,early_stop_extrapolation", "--seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert "--seeds '0' must name 1..20 distinct seeds" in err and "unknown" not in err


def test_seeds_are_a_count_a_range_or_a_list():
    """A measurement's later seeds can run on another machine (--seeds 3-5) without its first ones."""
    from agent.cli.measure import run_seeds

    assert run_seeds("6") == [0, 1, 2, 3, 4, 5] and run_seeds("3-5") == [3, 4, 5] and run_seeds("0,2,4") == [0, 2, 4]
    for bad, why in (("0", "1..20"), ("21", "1..20"), ("5-3", "1..20"), ("1,1", "distinct"), ("-1,2", "none negative"),
                     ("x", "is not"), ("2-", "is not"), ("1-2-3", "is not"), ("0-20", "1..20")):
        with pytest.raises(BadInput, match=why):
            run_seeds(bad)


def test_read_episode_on_the_loop_with_boundary_fakes(tmp_path):
    """The reader agrees with what the real loop writes (nodes + report over fake ports)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from support.graph_fakes import PLAN, run_fake

    run_fake(tmp_path)
    ep = read_episode(tmp_path)
    promoted_gain = sum(g for a, v, g in PLAN.values() if (a, v) in (("validate", "pass"), ("validate", "inconclusive"),
                                                                    ("train", None)) and g > 0) - 1.0  # X07 is filtered
    assert ep["families"] == ["sql"] and ep["endpoint"]["sql"] == pytest.approx(40.0 + promoted_gain)
    assert ep["promotions"] == 3 and ep["authorizations"] == 4  # S02, S03, S05 (leased), S06
    assert ep["wasted_h"] > 0 and ep["trajectory"][-1][1] == ep["endpoint"]
    # where it spent without promoting: S03 rolled back by the gate's target check (its own words
    # kept), S04's failed trial; their hours are the wasted hours
    lost = {r["card"]: r for r in ep["unpromoted"]}
    assert sorted(lost) == ["S03", "S04"] and sum(r["hours"] for r in lost.values()) == pytest.approx(ep["wasted_h"])
    assert lost["S03"]["reason"] == "gate: target: gain -3.0 pp" and cause(lost["S03"]) == "gate: target"
    assert lost["S04"]["outcome"] == "trial_failed" and lost["S04"]["action"] == "validate"
    # a negative number's sign is not part of the rule's name: one cause for every reading
    moved = [{"reason": f"trial inconclusive: target moved {x} pp: below the 1 pp gain"} for x in ("0.8", "-0.95", "+1")]
    assert {cause(r) for r in moved} == {"trial inconclusive: target moved"}


def test_where_unpromoted_sums_hours_per_cause_and_names_the_cards():
    a = _ep("a", 0, 40.0) | {"unpromoted": [
        {"card": "S03", "outcome": "rolled_back", "reason": "gate: ifeval_guard: IFEval strict fell 3.1 pp", "hours": 4.0},
        {"card": "G02", "outcome": "trial_failed", "reason": "trial fail: successive halving (eta = 5): gain 1 pp",
         "hours": 1.5}]}
    b = _ep("a", 1, 40.0) | {"unpromoted": [
        {"card": "S03", "outcome": "rolled_back", "reason": "gate: ifeval_guard: IFEval strict fell 2.4 pp", "hours": 4.0},
        {"outcome": "rolled_back", "hours": 2.0}]}  # a digest stored before reasons were kept
    where = S.summarise([a, b])["policies"]["a"]["unpromoted"]
    assert list(where) == ["gate: ifeval_guard", "rolled_back", "trial fail: successive halving"]
    assert where["gate: ifeval_guard"] == {"n": 2, "hours": 8.0, "cards": {"S03": 2}}
    assert where["rolled_back"] == {"n": 1, "hours": 2.0, "cards": {}}
    from agent.experiments.compare_output import markdown
    md = markdown(S.summarise([a, b]), {"seeds": [0, 1], "budget": "10h", "config": None, "wall_s": 1.0})
    assert "| a | gate: ifeval_guard | 2 | 8.00 | S03 x2 |" in md and "(not recorded)" in md


def test_one_paired_seed_gives_a_difference_without_a_p_value():
    s = S.summarise([_ep("a", 0, 44.0), _ep("b", 0, 41.0)])
    pair = s["pairs"]["a_vs_b"]["endpoint"]
    assert pair["diffs"] == [3.0] and pair["mean_diff"] == 3.0 and pair["sign_flip_p"] is None and pair["ci95"] is None


def test_an_episode_that_never_reached_the_gate_reads_the_initial_adoption_scores_of_a_paired_one(tmp_path):
    """`idle` rejects everything, so it never scored its initial parent on adoption; its trajectory,
    adoption endpoint and IFEval change come from `good`'s scores of the same weights."""
    script = tmp_path / "fake_run.py"
    script.write_text(fake_run())

    def argv_for(out, p, s):
        argv = C.episode_argv(out, p, s, budget="10h", config=None)
        return [sys.executable, str(script)] + argv[argv.index("run") + 1:]

    summary = C.compare(tmp_path / "cmp", ["good", "idle"], [0, 1], argv_for=argv_for)
    idle = summary["policies"]["idle"]
    assert idle["n"] == 2 and idle["endpoint_mean"] == pytest.approx(39.5)  # test split, initial parent
    assert idle["endpoint_adoption_mean"] == pytest.approx(40.0) and idle["trajectory_auc"] == pytest.approx(40.0)
    assert idle["ifeval_drop_vs_initial"]["ifeval.prompt_strict"] == 0.0 and idle["wasted_h"] == 0.0
    assert summary["pairs"]["good_vs_idle"]["endpoint"]["diffs"] == [4.0, 5.0]
