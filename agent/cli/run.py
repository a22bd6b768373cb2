"""`agent run`: one episode of the control loop, or `--resume ID` of one that was interrupted."""

from __future__ import annotations

import argparse
import json
import os
from agent.config import FLAG_KEYS, build_config
from agent.inputs import check_out_dir
from agent.run.approvals import pending
from policies.authorize import check_reads_gonogo

EXAMPLES = """examples:
  agent run --episode-budget 36gpuh
  agent run --config runs/test.yaml --out runs/ep-test --quiet
  agent run --proposer openai --base-url http://127.0.0.1:8000/v1 --model qwen3-4b
  agent run --resume ep-test
  agent run --config runs/test.yaml --tracking-uri http://127.0.0.1:5000
"""


def register(sub) -> None:
    p = sub.add_parser("run", help="run one episode (propose, authorize, validate, train, gate, commit)",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episode-budget", dest="episode_budget", help="device-hours, e.g. 36gpuh, 2.5h, 90m")
    p.add_argument("--config", help="YAML run config (runs/default.yaml, runs/test.yaml, runs/qwen3-4b.yaml)")
    p.add_argument("--policy", help="authorization policy (default bcit)")
    p.add_argument("--gonogo-model", dest="gonogo_model", metavar="JSON|library",
                   help="fitted go/no-go (agent gonogo SOURCES --model OUT.json): bcit_predictive's trial rule; "
                        "`library`: the refit the bank's library stores (each bcit_predictive episode's "
                        "consolidation refits the model it froze on its paired runs)")
    p.add_argument("--extrapolation-model", dest="extrapolation_model", metavar="JSON",
                   help="fitted forgetting extrapolation (agent extrapolate ... --save OUT.json): the trial's "
                        "retention check reads the extrapolated full-length change, for every policy")
    p.add_argument("--seed", type=int, help="run seed")
    p.add_argument("--world-seed", dest="world_seed", type=int,
                   help="seed of the embedded world (default 0): another draw of the same recipe")
    p.add_argument("--bank", help="experience bank path (built from the world's seed bank when missing)")
    p.add_argument("--out", help="run directory, runs/ID")
    p.add_argument("--proposer", choices=("catalogue", "openai"), help="catalogue only, or plus an LLM")
    p.add_argument("--base-url", dest="base_url", help="OpenAI-compatible endpoint (proposer openai)")
    p.add_argument("--model", help="model name at that endpoint (proposer openai)")
    p.add_argument("--cards", metavar="DIR", help="folder of imported recipes (agent cards import) to decide too")
    p.add_argument("--cards-only", dest="cards_only", action="store_true", default=None,
                   help="decide the --cards folder instead of the library's catalogue")
    p.add_argument("--approve", metavar="KINDS",
                   help="pause for `agent approve` before a full run and/or a promotion: train, promote or both")
    p.add_argument("--resume", metavar="ID", help="resume the run runs/ID (or a run directory) where it stopped")
    p.add_argument("--quiet", action="store_true", default=None, help="log lines only, no live display")
    p.add_argument("--tracking-uri", dest="tracking_uri", metavar="URI",
                   help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<runs folder>/mlflow.db)")
    p.add_argument("--no-tracking", dest="tracking", action="store_false", default=None,
                   help="do not mirror the episode into MLflow")
    p.add_argument("--no-cache", dest="no_cache", action="store_true",
                   help="run every trial, full run and evaluation even when the run cache holds it")
    p.set_defaults(func=cmd_run)


def waiting_text(wait, episode_id: str) -> str:
    """What a paused episode shows: the decision record, its hash and the device-hours."""
    return (f"episode {episode_id}: waiting for approval of {wait.kind} for {wait.candidate_id} "
            f"({wait.device_hours:.3f} device-hours)\ndecision {wait.decision_hash}\n"
            f"{json.dumps(wait.decision, indent=1)}\n"
            f"answer with: agent approve {episode_id} --decision {wait.decision_hash} --yes|--no "
            f"[--by NAME --reason TEXT]")


def cmd_run(args) -> int:
    from agent.loop.episode import run_episode  # noqa: PLC0415 (numpy)

    cfg = build_config(args.config, {k: getattr(args, k) for k in FLAG_KEYS})
    if cfg.gonogo_model and not args.resume:  # a resume runs its manifest's config, checked when it started
        check_reads_gonogo(cfg.policy)
    if cfg.out and not args.resume:
        check_out_dir(cfg.out)
    if args.no_cache:  # the run cache reads it (experience_bank.runcache.from_env)
        os.environ["AGENT_NO_CACHE"] = "1"
    final = run_episode(cfg, resume=args.resume)
    if (wait := pending(final["run_dir"])) is not None:
        print(waiting_text(wait, final["episode_id"]))
        return 0
    print(f"episode {final.get('episode_id')}: stopped ({final.get('stop_reason')}), {final.get('stage', 0)} "
          f"promotion(s), {final.get('spent_h', 0.0):.3f} device-hours, library version "
          f"{final.get('library_version')}; report in the run directory (report.md, report.html)")
    return 0
