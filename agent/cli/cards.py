"""`agent cards import`: a TRL CLI config or a LlamaFactory SFT/LoRA YAML as a candidate card."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Annotated

from pydantic import TypeAdapter, ValidationError

from agent.config import build_config
from agent.inputs import check_out_dir
from agent.world.factory import world_for
from agent.world.usercards.recipes import card_file, card_id, import_recipe, read_recipe
from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.cards import NominalBudget

EXAMPLES = """examples:
  agent cards import sft.yaml --config runs/test.yaml --device-hours 3 --out cards
  agent cards import grpo.yaml --family sql --target sql/target --device-hours 5 --out cards
  agent cards import llamafactory_lora_sft.yaml --device-hours 2 --out cards
  agent run --config runs/test.yaml --cards cards
"""


def register(sub) -> None:
    group = sub.add_parser("cards", help="the user's own recipes as candidates (import)")
    cmds = group.add_subparsers(dest="cards_cmd", required=True)
    p = cmds.add_parser("import", help="turn a TRL or LlamaFactory YAML config into a candidate card",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="the recipe: a `trl sft|grpo --config` YAML or a LlamaFactory SFT/LoRA YAML")
    p.add_argument("--config", help="the run config whose world the card is for (its datasets and model)")
    p.add_argument("--family", help="finance, sql or function (default: the first dataset's family)")
    p.add_argument("--target", action="append", default=[], metavar="SUITE",
                   help="the target suite the card is for (checked against the family)")
    p.add_argument("--device-hours", dest="device_hours", type=float, required=True,
                   help="the nominal device-hours of the full run (the card's budget)")
    p.add_argument("--id", dest="card_id", help="card id (default U-<file stem>)")
    p.add_argument("--title", help="card title (default: format and file name)")
    p.add_argument("--nu", choices=("restart", "continue", "none"), default="restart",
                   help="how a trial relates to the full run (default restart: an independent short run)")
    p.add_argument("--out", default="cards", help="folder to write <id>.json into (default cards/)")
    p.add_argument("--replace", action="store_true",
                   help="overwrite a card of the same id already in --out (default: refuse)")
    p.set_defaults(func=cmd_import)


_DEVICE_HOURS = TypeAdapter(Annotated[float, NominalBudget.model_fields["device_hours"]],
                            config=NominalBudget.model_config)
"""The card's own device_hours field (finite, > 0, at most 100,000), validated on its own."""


def _check_device_hours(value: float) -> None:
    """--device-hours against the card's field, before the world is built."""
    try:
        _DEVICE_HOURS.validate_python(value)
    except ValidationError as exc:
        raise BadInput(f"--device-hours {value:g} is refused ({exc.errors()[0]['msg']}): give the full run's "
                       "nominal cost, e.g. --device-hours 3") from None


def _check_not_taken(out: Path, replace: bool) -> None:
    """An import never overwrites a card in silence: two recipes with the same file name (the default
    id is its stem) would otherwise leave one card, and which one would depend on the order."""
    if out.exists() and not replace:
        raise BadInput(f"{out} already holds card {out.stem}: pass --replace to overwrite it, or --id to "
                       "import this recipe under another id")


def cmd_import(args) -> int:
    source = Path(args.file)
    if source.is_dir():
        raise BadInput(f"recipe {source} is a directory: pass one YAML file `trl` or LlamaFactory reads "
                       "(import each recipe on its own)")
    if not source.is_file():
        raise BadInput(f"recipe {source} not found: pass the YAML file `trl` or LlamaFactory reads")
    _check_device_hours(args.device_hours)
    _check_not_taken(Path(args.out) / f"{args.card_id or card_id(source)}.json", args.replace)
    # The world may take minutes to build: what the flags and the file can refuse on their own is
    # refused first (read_recipe: every key, type and the family); only whether its datasets are
    # pools of the world waits for the build.
    read_recipe(source, family=args.family, targets=tuple(args.target))
    check_out_dir(args.out)
    world = world_for(build_config(args.config, {}))
    imported = import_recipe(source, world, family=args.family, targets=tuple(args.target),
                             device_hours=args.device_hours, card_id_=args.card_id, title=args.title, nu=args.nu)
    out = Path(args.out) / f"{imported.proposal.card.id}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(card_file(imported, source), indent=1, ensure_ascii=False) + "\n")
    for key, field in imported.mapped.items():
        print(f"  {key} -> {field}")
    if imported.run_owned:
        print(f"  set by the agent for every run (not carried): {', '.join(imported.run_owned)}")
    print(f"card {imported.proposal.card.id} ({imported.fmt}, {imported.proposal.card.method}, "
          f"{imported.proposal.card.family}) written to {out}")
    return 0
