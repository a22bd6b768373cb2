"""`agent run --cards DIR`: the imported cards of a folder as candidates of one episode.

The folder is read once, when the episode starts, and frozen into the run directory
(`user_cards.json`), so a resumed episode decides exactly the cards it started with. Each card
is a Proposal (no library evidence): the authorizer treats it as any new card, unless the
bank holds records for it.
"""

from __future__ import annotations

import json
from pathlib import Path

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.hashing import content_hash
from experience_bank.records import Proposal, parse_record

from agent.run.rundir import RunDir



def read_folder(folder: str | Path, taken_ids: frozenset[str] = frozenset()) -> list[Proposal]:
    """Every `*.json` card of a folder `agent cards import` wrote; BadInput naming a bad one."""
    root = Path(folder)
    if not root.is_dir():
        raise BadInput(f"cards folder {root} not found: import recipes with `agent cards import FILE.yaml --out {root}`")
    files = sorted(root.glob("*.json"))
    if not files:
        raise BadInput(f"cards folder {root} holds no *.json card: import recipes with `agent cards import`")
    cards, seen = [], {}
    for path in files:
        try:
            row = json.loads(path.read_text(encoding="utf-8"))
            record = parse_record(json.dumps(row["record"]))
        except (ValueError, KeyError, TypeError, BadInput) as exc:
            raise BadInput(f"card file {path} is not an imported card ({str(exc).splitlines()[0][:120]}): "
                           "import it again with `agent cards import`") from None
        if not isinstance(record, Proposal):
            raise BadInput(f"card file {path} holds a {record.kind} record: cards are imported recipes (proposals)")
        cid = record.card.id
        if cid in taken_ids or cid in seen:
            raise BadInput(f"card id {cid} of {path} is already taken by {seen.get(cid, 'the library')}: "
                           "import it again with another --id")
        seen[cid] = path.name
        cards.append(record)
    return cards


def freeze(run_dir: RunDir, cards: list[Proposal]) -> None:
    """Write the episode's user cards once (a resumed episode keeps what it has)."""
    path = run_dir.user_cards_file
    if not path.exists():
        write_atomic(path, json.dumps([c.model_dump(mode="json") for c in cards], indent=1, ensure_ascii=False))


def frozen(run_dir: RunDir) -> list[tuple[str, Proposal]]:
    """(record hash, card) of an episode's frozen user cards; empty when it has none."""
    path = run_dir.user_cards_file
    if not path.exists():
        return []
    try:
        records = [parse_record(json.dumps(r)) for r in json.loads(path.read_text(encoding="utf-8"))]
    except (ValueError, TypeError, BadInput) as exc:
        raise BadInput(f"{path} is damaged ({str(exc).splitlines()[0][:120]}): restore it, or start a new run") from None
    return [(content_hash(r), r) for r in records]
