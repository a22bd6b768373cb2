"""`agent run --cards DIR`: the imported cards of a folder as candidates of one episode.

The folder is read once, when the episode starts, and frozen into the run directory
(`user_cards.json`), so a resumed episode decides exactly the cards it started with. Each card
is a Proposal (no library evidence): the authorizer treats it as any new card, unless the
bank holds records for it. A library record whose card has the card's id and content hash is of
the same card (an earlier episode ran it and consolidation kept what it measured), so those
records are its evidence and it is decided as they are; the same id on another card is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from experience_bank.errors import BadInput
from experience_bank.files import write_atomic
from experience_bank.hashing import content_hash
from experience_bank.records import Proposal, parse_record

from agent.run.rundir import RunDir

if TYPE_CHECKING:
    from experience_bank.bank import LibraryEntry



def library_cards(library: Iterable[LibraryEntry]) -> dict[str, frozenset[str]]:
    """card id -> the content hashes of the cards the library holds under that id."""
    held: dict[str, set[str]] = {}
    for e in library:
        held.setdefault(e.record.card.id, set()).add(e.record.card.content_hash())
    return {cid: frozenset(hashes) for cid, hashes in held.items()}


def read_folder(folder: str | Path, library: Mapping[str, frozenset[str]] | None = None) -> list[Proposal]:
    """Every `*.json` card of a folder `agent cards import` wrote; BadInput naming a bad one, or
    one whose id the library (`library_cards`) holds for a card of other content."""
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
        if cid in seen:
            raise BadInput(f"card id {cid} of {path} is already taken by {seen[cid]}: import it again with another --id")
        held = (library or {}).get(cid)
        if held is not None and record.card.content_hash() not in held:
            raise BadInput(f"card id {cid} of {path} is already taken in the bank's library by a card with other "
                           "content: rename it (`agent cards import FILE --id NEW`) or use a new bank (--bank)")
        seen[cid] = path.name
        cards.append(record)
    return cards


def with_evidence(cards: list[tuple[str, Proposal]], library: Iterable[LibraryEntry]
                  ) -> tuple[list[LibraryEntry], list[tuple[str, Proposal]]]:
    """The library entries that are user cards' evidence (same id, same content hash), and the
    (hash, card) of the cards without any: those go to the authorizer as new cards."""
    mine = {(r.card.id, r.card.content_hash()) for _, r in cards}
    held = [e for e in library if (e.record.card.id, e.record.card.content_hash()) in mine]
    known = {e.record.card.id for e in held}
    return held, [(h, r) for h, r in cards if r.card.id not in known]


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
