"""A run-cache hit serves only what its writer sealed: an edited value, an edited, swapped or
extra file (a symlink to /etc/passwd, a link to /etc/ssl), a value that no longer parses or
that its files do not re-derive is a miss that recomputes, with one warning naming the entry."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experience_bank.hashing import canonical_json
from experience_bank.runcache import RunCache, was_cached
from experience_bank.sealing import Mismatch, seal

KEY = {"kind": "eval", "model": "m1", "items": "i1"}
TRUE = {"adoption": 41.0, "ifeval": 62.5}


def _compute(dest: Path, calls: list):
    def run():
        calls.append(1)
        (dest / "sub").mkdir(parents=True, exist_ok=True)
        (dest / "scores.json").write_text(json.dumps(TRUE))
        (dest / "sub" / "weights.bin").write_bytes(bytes(range(64)))
        return dict(TRUE)
    return run


def _load(text: str, dest: Path) -> dict:
    """Like the producers' loaders: parse strictly, and re-derive the value from the files."""
    value = json.loads(text)
    if not isinstance(value, dict) or set(value) != set(TRUE):
        raise ValueError(f"not a result: {text[:40]!r}")
    if json.loads((dest / "scores.json").read_text()) != value:
        raise Mismatch("the stored value is not what its scores.json says")
    return value


def _run(cache: RunCache, dest: Path) -> tuple[dict, list]:
    calls: list = []
    return cache.run(KEY, dest, _compute(dest, calls), dump=json.dumps, load=_load), calls


def _cache(root: Path) -> tuple[RunCache, list[str]]:
    warnings: list[str] = []
    return RunCache(root / "cache", warn=warnings.append), warnings


def _entry(cache: RunCache) -> Path:
    (entry,) = cache.entries()
    return entry.path


def _edit_meta(path: Path, change, reseal: bool) -> None:
    meta = json.loads((path / "entry.json").read_text())
    change(meta)
    if reseal:  # a forger who recomputes the seal (no secret set)
        meta["seal"] = seal(meta)
    (path / "entry.json").write_text(canonical_json(meta))


def _served_ok(cache, warnings, tmp_path, name="second") -> tuple[dict, list]:
    value, calls = _run(cache, tmp_path / name)
    assert value == TRUE and json.loads((tmp_path / name / "scores.json").read_text()) == TRUE
    return value, calls


@pytest.mark.parametrize("reseal", [False, True], ids=["value-edited", "value-edited-and-resealed"])
def test_an_edited_value_is_never_served(tmp_path, reseal):
    """The adoption metric of an evaluation edited in entry.json (as the gate would read it)."""
    cache, warnings = _cache(tmp_path)
    _run(cache, tmp_path / "first")
    _, calls = _served_ok(cache, warnings, tmp_path, "untouched")  # an untouched entry: served, unwarned
    assert calls == [] and warnings == [] and was_cached(tmp_path / "untouched")
    path = _entry(cache)

    def promote(meta):
        meta["value"] = json.dumps(TRUE | {"adoption": 99.0})

    _edit_meta(path, promote, reseal)
    value, calls = _served_ok(cache, warnings, tmp_path)
    assert calls == [1] and value["adoption"] == 41.0
    assert len(warnings) == 1 and str(path) in warnings[0] and "recomputed" in warnings[0]
    assert not was_cached(tmp_path / "second")


@pytest.mark.parametrize("reseal", [False, True], ids=["edited", "edited-and-resealed"])
def test_a_value_that_no_longer_parses_is_recomputed_not_a_traceback(tmp_path, reseal):
    cache, warnings = _cache(tmp_path)
    _run(cache, tmp_path / "first")
    path = _entry(cache)
    _edit_meta(path, lambda meta: meta.update(value='{"steps": 1, "loss": -5'), reseal)
    _, calls = _served_ok(cache, warnings, tmp_path)
    assert calls == [1] and len(warnings) == 1 and str(path) in warnings[0]
    assert not (tmp_path / "second" / "provenance.json").read_text().count('"cached":true')


def test_an_edited_file_and_a_file_swapped_for_a_symlink_are_refused(tmp_path):
    cache, warnings = _cache(tmp_path)
    _run(cache, tmp_path / "first")
    files = _entry(cache) / "files"
    (files / "sub" / "weights.bin").write_bytes(b"\x01" + bytes(range(1, 64)))
    _, calls = _served_ok(cache, warnings, tmp_path)
    assert calls == [1] and len(warnings) == 1
    files = _entry(cache) / "files"
    (files / "scores.json").unlink()
    (files / "scores.json").symlink_to("/etc/passwd")
    _, calls = _served_ok(cache, warnings, tmp_path, "third")
    assert calls == [1] and len(warnings) == 2 and not (tmp_path / "third" / "scores.json").is_symlink()


@pytest.mark.parametrize("extra", ["passwd-link", "ssl-dir-link", "regular-file", "fifo"])
def test_an_entry_holding_anything_it_does_not_list_is_refused(tmp_path, extra):
    cache, warnings = _cache(tmp_path)
    _run(cache, tmp_path / "first")
    files = _entry(cache) / "files"
    if extra == "passwd-link":
        (files / "sub" / "passwd").symlink_to("/etc/passwd")
    elif extra == "ssl-dir-link":
        (files / "ssl").symlink_to("/etc/ssl", target_is_directory=True)
    elif extra == "regular-file":
        (files / "sub" / "planted.py").write_text("import os\n")
    else:
        os.mkfifo(files / "pipe")
    _, calls = _served_ok(cache, warnings, tmp_path)
    assert calls == [1] and len(warnings) == 1 and str(_entry(cache).parent) in warnings[0]
    served = sorted(p.relative_to(tmp_path / "second").as_posix() for p in (tmp_path / "second").rglob("*"))
    assert served == ["provenance.json", "scores.json", "sub", "sub/weights.bin"]


def test_a_secret_seals_entries_so_a_reseal_without_it_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_RUN_CACHE_SECRET", "shared-by-the-workers")
    cache, warnings = _cache(tmp_path)
    _run(cache, tmp_path / "first")
    path = _entry(cache)
    assert json.loads((path / "entry.json").read_text())["seal"].startswith("hmac-sha256:")
    monkeypatch.delenv("AGENT_RUN_CACHE_SECRET")
    _edit_meta(path, lambda meta: meta.update(wall_seconds=0.0), reseal=True)  # resealed without the secret
    monkeypatch.setenv("AGENT_RUN_CACHE_SECRET", "shared-by-the-workers")
    _, calls = _served_ok(cache, warnings, tmp_path)
    assert calls == [1] and len(warnings) == 1


# --- any edit of an entry: a miss, never a served changed value --------------------------

_EDITS = st.one_of(
    st.tuples(st.just("byte"), st.sampled_from(["entry.json", "files/scores.json", "files/sub/weights.bin"]),
              st.integers(min_value=0, max_value=10_000), st.integers(min_value=1, max_value=255)),
    st.tuples(st.just("truncate"), st.sampled_from(["entry.json", "files/scores.json", "files/sub/weights.bin"]),
              st.integers(min_value=0, max_value=10_000), st.just(0)),
    st.tuples(st.just("add"), st.sampled_from(["files/x", "files/sub/x", "files/sub/deeper/x"]), st.just(0), st.just(0)),
    st.tuples(st.just("link"), st.sampled_from(["files/scores.json", "files/sub/weights.bin", "files/sub/l"]),
              st.just(0), st.just(0)),
    st.tuples(st.just("value"), st.text(max_size=30), st.just(0), st.just(0)),
)


def _apply(entry: Path, edit) -> None:
    what, where, at, xor = edit
    if what == "value":  # a new value, resealed: only re-derivation from the files can refuse it
        try:
            _edit_meta(entry, lambda meta: meta.update(value=json.dumps(TRUE | {"adoption": where})), reseal=True)
        except ValueError:
            pass  # an earlier edit left no entry.json to parse
        return
    path = entry / where
    if what in ("byte", "truncate") and (path.is_symlink() or not path.is_file() or path.stat().st_size == 0):
        return  # an earlier edit emptied or replaced it
    if what == "byte":
        data = bytearray(path.read_bytes())
        data[at % len(data)] ^= xor
        path.write_bytes(bytes(data))
    elif what == "truncate":
        path.write_bytes(path.read_bytes()[: at % path.stat().st_size])
    elif what == "add":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("planted")
    else:
        path.unlink(missing_ok=True)
        path.symlink_to("/etc/passwd")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(_EDITS, min_size=1, max_size=3))
def test_any_edit_of_an_entry_is_a_miss_never_a_served_changed_value(edits):
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        cache, warnings = _cache(tmp_path)
        _run(cache, tmp_path / "first")
        entry = _entry(cache)
        before = {p.relative_to(entry).as_posix(): p.read_bytes() for p in entry.rglob("*") if p.is_file()}
        for edit in edits:
            _apply(entry, edit)
        after = {p.relative_to(entry).as_posix(): (p.readlink() if p.is_symlink() else p.read_bytes())
                 for p in entry.rglob("*") if p.is_file() or p.is_symlink()}
        value, calls = _run(cache, tmp_path / "second")
        assert value == TRUE  # whatever was edited, the value returned is the true one
        served = {p.relative_to(tmp_path / "second").as_posix(): p.read_bytes()
                  for p in (tmp_path / "second").rglob("*") if p.is_file() and p.name != "provenance.json"}
        assert served == {k.removeprefix("files/"): v for k, v in before.items() if k.startswith("files/")}
        assert not any(p.is_symlink() for p in (tmp_path / "second").rglob("*"))
        if calls == []:  # served: only an edit that left the entry's meaning as it was can be served
            meta_before, meta_after = json.loads(before["entry.json"]), json.loads(after["entry.json"])
            assert meta_before == meta_after and {k: v for k, v in after.items() if k != "entry.json"} == {
                k: v for k, v in before.items() if k != "entry.json"}
        else:
            assert len(warnings) == 1 and str(entry) in warnings[0]
