"""Text-to-SQL: source "Spider-like" -> target "BIRD-like", over SQLite files we generate.

Each schema is a main table (label, category, number) and a child table pointing at it.
Source schemas are clean and questions name stored values directly. Target schemas differ,
store coded categories ('PREM', 'A') and upper-case labels, and the question speaks in
words ("premium clients"): an `Evidence:` line maps the words to codes, as BIRD does.
Databases are rebuilt byte-identically from the seed into a cache folder (AGENT_WORLD_DIR).
"""

from __future__ import annotations

import os
import random
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from experience_bank.hashing import content_hash

FIRST = ("Ada", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jia", "Kai", "Lena", "Milo",
         "Nia", "Otto", "Pia", "Quin", "Rosa", "Sami", "Tara", "Uma", "Vik", "Wren", "Yuri", "Zoe")
LAST = ("Stone", "Reed", "Hale", "Moss", "Park", "Cole", "Nash", "Frey", "Lund", "Ortiz", "Shaw", "Vega")


@dataclass(frozen=True)
class Schema:
    db: str
    main: str            # main table
    label: str           # its text label column
    cat: str             # its category column
    num: str             # its numeric column
    child: str           # child table (fk column is `<main singular>_id`)
    fk: str
    child_num: str
    cats: dict[str, str]  # question word -> stored value
    label_pool: tuple[str, ...]
    upper_labels: bool = False

    def ddl(self) -> str:
        return (f"{self.main}(id, {self.label}, {self.cat}, {self.num}); "
                f"{self.child}(id, {self.fk}, {self.child_num})")


def _names(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(f"{f} {last}" for f in FIRST for last in LAST) + extra


_PRODUCTS = tuple(f"{a} {b}" for a in ("red", "blue", "mini", "smart", "eco", "pro", "solar", "retro")
                  for b in ("lamp", "desk", "kettle", "drone", "watch", "chair", "phone", "bike"))
_TITLES = tuple(f"{a} {b}" for a in ("Silent", "Golden", "Hidden", "Last", "Broken", "Winter", "Iron", "Lost")
                for b in ("River", "Garden", "Key", "Empire", "Song", "Map", "Tower", "Harbor"))

SOURCE = (
    Schema("store", "products", "name", "category", "price", "orders", "product_id", "quantity",
           {c: c for c in ("toys", "garden", "kitchen", "sports", "office")}, _PRODUCTS),
    Schema("school", "students", "name", "city", "age", "scores", "student_id", "score",
           {c: c for c in ("Oslo", "Lima", "Pune", "Cork", "Kyiv")}, _names()),
    Schema("library", "books", "title", "genre", "year", "loans", "book_id", "days",
           {c: c for c in ("poetry", "history", "science", "drama", "travel")}, _TITLES),
)
TARGET = (
    Schema("bank", "clients", "full_name", "tier", "balance", "loans", "client_id", "amount",
           {"premium": "PREM", "standard": "STD", "basic": "BAS", "student": "STU"}, _names(), True),
    Schema("clinic", "patients", "patient_name", "sex", "birth_year", "visits", "patient_id", "cost",
           {"male": "M", "female": "F"}, _names(), True),
    Schema("racing", "drivers", "surname", "nation", "wins", "results", "driver_id", "points",
           {"British": "GBR", "German": "GER", "Italian": "ITA", "Brazilian": "BRA", "Japanese": "JPN"},
           tuple(LAST) + tuple(f"{last}{s}" for last in LAST for s in ("ton", "berg", "ini", "son")), True),
)
SCHEMAS = {s.db: s for s in SOURCE + TARGET}
N_MAIN, N_CHILD = 40, 120


def rows(schema: Schema, seed: int) -> tuple[list[tuple], list[tuple]]:
    """The table contents, a pure function of (schema, seed)."""
    return _rows(schema.db, seed)


@lru_cache(maxsize=16)
def _rows(db: str, seed: int) -> tuple[list[tuple], list[tuple]]:
    schema = SCHEMAS[db]
    rng = random.Random(f"sql-db|{schema.db}|{seed}")
    labels = rng.sample(schema.label_pool, N_MAIN)
    if schema.upper_labels:  # the "dirtier" side: labels stored upper-case
        labels = [x.upper() for x in labels]
    main = [(i + 1, labels[i], rng.choice(tuple(schema.cats.values())), rng.randint(1, 99)) for i in range(N_MAIN)]
    child = [(j + 1, rng.randint(1, N_MAIN), rng.randint(1, 500)) for j in range(N_CHILD)]
    return main, child


def world_dir() -> Path:
    """AGENT_WORLD_DIR, else the project's cache (AGENT_CACHE), else ~/.cache/posttrain-agent."""
    env = os.environ.get("AGENT_WORLD_DIR") or os.environ.get("AGENT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "posttrain-agent"


def db_path(db: str, seed: int) -> Path:
    """Path of the generated database, built on first use (atomic rename: safe in parallel).

    The file name carries a hash of the schema and rows, so a generator change can never
    leave a stale database behind a gold query.
    """
    path = world_dir() / "sqlite" / f"seed{seed}" / f"{db}-{_digest(db, seed)}.sqlite"
    if not path.exists():
        _build(SCHEMAS[db], seed, path)
    return path


@lru_cache(maxsize=32)
def _digest(db: str, seed: int) -> str:
    main, child = _rows(db, seed)
    return content_hash([SCHEMAS[db].ddl(), [list(r) for r in main], [list(r) for r in child]])[:12]


def _build(schema: Schema, seed: int, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    main, child = rows(schema, seed)
    con = sqlite3.connect(tmp)
    with con:
        con.execute(f"CREATE TABLE {schema.main} (id INTEGER PRIMARY KEY, {schema.label} TEXT, "
                    f"{schema.cat} TEXT, {schema.num} INTEGER)")
        con.execute(f"CREATE TABLE {schema.child} (id INTEGER PRIMARY KEY, {schema.fk} INTEGER "
                    f"REFERENCES {schema.main}(id), {schema.child_num} INTEGER)")
        con.executemany(f"INSERT INTO {schema.main} VALUES (?,?,?,?)", main)
        con.executemany(f"INSERT INTO {schema.child} VALUES (?,?,?)", child)
    con.close()
    os.replace(tmp, path)


def _question(rng: random.Random, s: Schema, label: str, word: str, x: int) -> tuple[str, str]:
    """(question, gold SQL) from one of the templates."""
    code, m, c = s.cats[word], s.main, s.child
    templates = (
        (f"How many {m} have {s.cat} {word}?", f"SELECT COUNT(*) FROM {m} WHERE {s.cat} = '{code}'"),
        (f"List the {s.label} of {m} with {s.num} above {x}.", f"SELECT {s.label} FROM {m} WHERE {s.num} > {x}"),
        (f"What is the average {s.num} of {m} with {s.cat} {word}?",
         f"SELECT AVG({s.num}) FROM {m} WHERE {s.cat} = '{code}'"),
        (f"What is the highest {s.num} among {m} with {s.cat} {word}?",
         f"SELECT MAX({s.num}) FROM {m} WHERE {s.cat} = '{code}'"),
        (f"How many {c} belong to {label}?",
         f"SELECT COUNT(*) FROM {c} JOIN {m} ON {c}.{s.fk} = {m}.id WHERE {m}.{s.label} = '{label}'"),
        (f"What is the total {s.child_num} of {c} for {label}?",
         f"SELECT SUM({c}.{s.child_num}) FROM {c} JOIN {m} ON {c}.{s.fk} = {m}.id WHERE {m}.{s.label} = '{label}'"),
        (f"List the {s.label} of the {x % 5 + 1} {m} with the highest {s.num}.",
         f"SELECT {s.label} FROM {m} ORDER BY {s.num} DESC LIMIT {x % 5 + 1}"),
        (f"How many {m} are there for each {s.cat}?", f"SELECT {s.cat}, COUNT(*) FROM {m} GROUP BY {s.cat}"),
        (f"How many {m} with {s.cat} {word} have {s.num} below {x}?",
         f"SELECT COUNT(*) FROM {m} WHERE {s.cat} = '{code}' AND {s.num} < {x}"),
        (f"List the {s.label} of {m} with {s.cat} {word} and {s.num} above {x}.",
         f"SELECT {s.label} FROM {m} WHERE {s.cat} = '{code}' AND {s.num} > {x}"),
        (f"How many {c} have {s.child_num} above {x * 5}?", f"SELECT COUNT(*) FROM {c} WHERE {s.child_num} > {x * 5}"),
    )
    return rng.choice(templates)


def make(rng: random.Random, schemas: tuple[Schema, ...], seed: int, evidence: str = "auto",
         linked: bool = False) -> tuple[str, str, dict]:
    """One item; evidence: 'auto' (when a code differs from the word), 'always' or 'never'."""
    s = rng.choice(schemas)
    main, _ = rows(s, seed)
    label, word, x = rng.choice(main)[1], rng.choice(tuple(s.cats)), rng.randint(5, 95)
    question, gold = _question(rng, s, label, word, x)
    schema_text = s.ddl() if not linked or f" {s.child}" in gold else s.ddl().split(";")[0]
    prompt = f"Schema: {schema_text}\nQuestion: {question}"
    code = s.cats[word]
    if evidence == "always" or (evidence == "auto" and code != word and word in question):
        prompt += f"\nEvidence: {word} refers to {s.cat} = '{code}'"
    ref = {"db": s.db, "seed": seed, "sql": gold, "completion": gold}
    return f"{s.db}|{question}", prompt, ref
