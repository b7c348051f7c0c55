"""The model library: registering in place, the atomic index, missing files, scans and demo models."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gguf_split import split_gguf
from speculens import paths
from speculens.models import demo
from speculens.models import library as library_module
from speculens.models.gguf_info import GGUFError
from speculens.models.library import EntryStatus, Library, LibraryError, SourceKind
from speculens.models.resolve import ModelNotFoundError, resolve_model


@pytest.fixture()
def lib() -> Library:
    """The user's library in the test's isolated home, without demo models."""
    return Library(include_demo=False)


def test_import_registers_in_place_without_copying(lib: Library, tiny) -> None:
    entry = lib.add(tiny.target)
    assert entry.path == tiny.target.resolve()
    assert entry.id == "tiny-target-0"
    assert entry.source.kind is SourceKind.LOCAL
    assert (entry.architecture, entry.quantization, entry.n_vocab) == ("llama", "F32", 996)
    assert not paths.models_dir().exists() or not any(paths.models_dir().rglob("*.gguf"))
    again = lib.add(tiny.target, compute_sha256=True)
    assert again.id == entry.id
    assert again.sha256 == hashlib.sha256(tiny.target.read_bytes()).hexdigest()
    assert [e.id for e in lib.entries()] == [entry.id]
    assert lib.get("tiny-target") == lib.get(entry.id) == lib.get(str(tiny.target))  # name, id, path


def test_ids_are_unique(lib: Library, tiny, tmp_path: Path) -> None:
    copy = tmp_path / "other" / tiny.target.name
    copy.parent.mkdir()
    shutil.copy(tiny.target, copy)
    a, b = lib.add(tiny.target), lib.add(copy)
    assert (a.id, b.id) == ("tiny-target-0", "tiny-target-0-2")


def test_index_is_json_with_a_version(lib: Library, tiny) -> None:
    lib.add(tiny.target)
    data = json.loads(lib.index_path.read_text(encoding="utf-8"))
    assert data["version"] == 1
    assert data["models"][0]["path"] == str(tiny.target.resolve())
    assert "status" not in data["models"][0]


def test_index_write_is_atomic(lib: Library, tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    lib.add(tiny.target)
    before = lib.index_path.read_bytes()

    def crash(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(library_module.os, "replace", crash)
    with pytest.raises(LibraryError, match="cannot write"):
        lib.add(tiny.identical)
    assert lib.index_path.read_bytes() == before  # the old index is untouched ...
    left = sorted(p.name for p in lib.index_path.parent.iterdir())
    assert left == ["library.json", "library.json.lock"]  # ... no temp file left (the lock file stays)


def test_missing_and_changed_files_are_shown_not_raised(lib: Library, tiny, tmp_path: Path) -> None:
    gone = tmp_path / "gone.gguf"
    changed = tmp_path / "changed.gguf"
    cut = tmp_path / "cut.gguf"
    shutil.copy(tiny.target, gone)
    shutil.copy(tiny.identical, changed)
    shutil.copy(tiny.identical, cut)
    for path in (gone, changed, cut):
        lib.add(path)
    gone.unlink()
    with changed.open("ab") as f:
        f.write(b"\0" * 10)
    os.truncate(cut, cut.stat().st_size - 100)  # cut short after it was registered: damaged, not just changed
    entries = {e.id: e for e in lib.entries()}
    status = {k: e.status for k, e in entries.items()}
    assert status == {"gone": EntryStatus.MISSING, "changed": EntryStatus.CHANGED, "cut": EntryStatus.DAMAGED}
    assert "truncated" in entries["cut"].problem
    with pytest.raises(ModelNotFoundError, match="missing"):
        resolve_model("gone", lib)
    assert resolve_model("changed", lib) == changed.resolve()


def test_a_name_that_matches_nothing_is_answered_with_the_nearest_ids(lib: Library, tiny, tmp_path: Path) -> None:
    """A tour typed the demo target's file name without its quantization, and a demo key without its last letter,
    and read the list of demo keys only."""
    model = tmp_path / "qwen2.5-coder-7b-instruct-q4_k_m.gguf"
    shutil.copy(tiny.target, model)
    entry = lib.add(model)
    assert entry.id == "qwen2.5-coder-7b-instruct-q4_k_m"
    for typed, meant in (
        ("qwen2.5-coder-7b", "qwen2.5-coder-7b-instruct-q4_k_m"),  # part of its file name: its id
        ("QWEN2.5-coder-7b-instruct", "qwen2.5-coder-7b-instruct-q4_k_m"),
        ("qwen-1.5", "qwen-1.5b"),  # a near spelling of a demo key
        ("gemma", "gemma-270m"),
    ):
        with pytest.raises(ModelNotFoundError) as raised:
            resolve_model(typed, lib)
        said = str(raised.value)
        assert "did you mean " in said, said
        guesses = said.split("did you mean ")[1].rstrip("?").split(" or ")
        assert guesses[0] == meant and len(guesses) <= 3, said
        assert all(resolve_model(g, lib) for g in guesses if g == entry.id)  # a guess is a name that works
    with pytest.raises(ModelNotFoundError) as raised:
        resolve_model("llama3", lib)
    assert "did you mean" not in str(raised.value)


def test_damaged_index_is_set_aside(lib: Library) -> None:
    lib.index_path.parent.mkdir(parents=True, exist_ok=True)
    lib.index_path.write_text("{ not json", encoding="utf-8")
    assert lib.entries() == []
    names = [p.name for p in lib.index_path.parent.iterdir() if not p.name.endswith(".lock")]
    assert [name.startswith("library.json.damaged-") for name in names] == [True]


def test_bad_file_is_refused(lib: Library, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a model")
    with pytest.raises(GGUFError, match="not a GGUF"):
        lib.add(bad)
    assert lib.entries() == []


def test_scan_registers_models_and_folds_split_parts(lib: Library, tiny, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(tiny.target, folder / "a.gguf")
    shutil.copy(tiny.mismatch, folder / "sub" / "b.gguf")
    split_gguf(tiny.identical, folder / "big.gguf", max_tensors=11)
    (folder / "broken.gguf").write_bytes(b"GGUF\x03\0\0\0")
    (folder / "notes.txt").write_text("ignored")
    result = lib.scan(folder)
    assert sorted(e.id for e in result.added) == ["a", "b", "big"]
    assert [p.name for p, _ in result.skipped] == ["broken.gguf"]
    assert "truncated" in result.skipped[0][1]
    big = next(e for e in result.added if e.id == "big")
    assert big.path.name == "big-00001-of-00002.gguf"
    assert big.size == sum(p.stat().st_size for p in folder.glob("big-*.gguf"))
    again = lib.scan(folder)
    assert again.added == () and sorted(e.id for e in again.known) == ["a", "b", "big"]
    assert [e.id for e in lib.scan(folder, recursive=False).known] == ["a", "big"]
    with pytest.raises(LibraryError, match="not a folder"):
        lib.scan(tmp_path / "nope")


def test_remove_deletes_only_our_own_files(lib: Library, tiny) -> None:
    inside = paths.models_dir() / "hub" / "x" / "model.gguf"
    inside.parent.mkdir(parents=True)
    shutil.copy(tiny.target, inside)
    ours = lib.add(inside)
    theirs = lib.add(tiny.identical)
    lib.remove(ours.id, delete_file=True)
    lib.remove(theirs.id, delete_file=True)
    assert not inside.exists()
    assert tiny.identical.exists()  # an imported file is the user's, never deleted
    assert lib.entries() == []


def _fake_demo(tiny_path: Path, key: str) -> demo.DemoModel:
    data = tiny_path.read_bytes()
    return demo.DemoModel(
        key=key,
        title=f"Fake demo {key}",
        role="target",
        filename=f"{key}.gguf",
        packages=("json",),  # installed everywhere, so the model counts as installed
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        hub_repo="example/fake",
    )


def test_installed_demo_models_appear(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    built, pending = _fake_demo(tiny.target, "built"), _fake_demo(tiny.identical, "pending")
    pending = replace(pending, facts={"family": "qwen2.5-coder", "quantization": "Q4_K_M", "context_length": 32768})
    monkeypatch.setattr(demo, "DEMO_MODELS", (built, pending))
    path = demo.demo_path(built)
    path.parent.mkdir(parents=True)
    shutil.copy(tiny.target, path)  # assembled earlier, e.g. by `generate --target built`
    entries = {e.id: e for e in Library().entries()}
    assert entries["built"].status is EntryStatus.OK
    assert entries["built"].source.kind is SourceKind.DEMO
    assert entries["built"].sha256 == built.sha256
    assert entries["built"].name == "Fake demo built"  # the demo's title, not the file's general.name
    assert entries["pending"].status is EntryStatus.NOT_ASSEMBLED
    assert entries["pending"].to_dict()["added"] is None  # not "added at 1970" in `models list --json`
    # What the file will say, shown before it is built (a tour read "–" for family, quantization and context).
    assert (entries["pending"].family, entries["pending"].quantization) == ("qwen2.5-coder", "Q4_K_M")
    assert entries["pending"].context_length == 32768
    assert time.time() - 60 < (entries["built"].added or 0) <= time.time()
    stored = json.loads(Library().index_path.read_text(encoding="utf-8"))["models"]
    assert [m["id"] for m in stored] == ["built"]  # placeholders are never written to the index
    assert Library(include_demo=False).entries()[0].id == "built"
    os.unlink(path)
    assert {e.id: e.status for e in Library().entries()}["built"] is EntryStatus.MISSING


def test_a_demo_model_whose_file_the_library_has_already_is_not_listed_to_be_built(
    tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a tour: a folder of the demo files scanned into a fresh library listed six models for three files, each
    beside its "not built yet" placeholder (the pair picker offered both)."""
    pending = _fake_demo(tiny.target, "pending")
    monkeypatch.setattr(demo, "DEMO_MODELS", (pending,))
    assert [e.status for e in Library().entries()] == [EntryStatus.NOT_ASSEMBLED]
    copy = tmp_path / "elsewhere" / pending.filename
    copy.parent.mkdir()
    shutil.copy(tiny.target, copy)
    Library().add(copy)
    entries = Library().entries()
    assert [(e.path, e.status) for e in entries] == [(copy, EntryStatus.OK)]
    copy.write_bytes(copy.read_bytes() + b"x")  # another file of that name: the demo is still to be built
    assert EntryStatus.NOT_ASSEMBLED in {e.status for e in Library().entries()}


def test_two_processes_adding_at_once_lose_nothing(lib: Library, tiny, tmp_path: Path) -> None:
    """Each change is a read-modify-write under an OS file lock, so concurrent writers cannot drop entries."""
    import subprocess
    import sys
    import textwrap

    folders = []
    for side in ("a", "b"):
        folder = tmp_path / side
        folder.mkdir()
        for i in range(6):
            shutil.copy(tiny.identical, folder / f"{side}{i}.gguf")
        folders.append(folder)
    code = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from speculens.models.library import Library
        library = Library()  # each add is its own locked read-modify-write
        for path in sorted(Path(sys.argv[1]).glob("*.gguf")):
            library.add(path)
        """
    )
    # Both inherit the test's SPECULENS_HOME, so they write the same index as ``lib``.
    runs = [subprocess.Popen([sys.executable, "-c", code, str(f)]) for f in folders]
    assert [p.wait(timeout=120) for p in runs] == [0, 0]
    names = {e.path.name for e in lib.entries() if e.source.kind is SourceKind.LOCAL}
    assert names == {f"{side}{i}.gguf" for side in "ab" for i in range(6)}


def test_one_library_object_shared_by_threads_loses_nothing(lib: Library, tiny, tmp_path: Path) -> None:
    import threading

    copies = []
    for i in range(8):
        copies.append(tmp_path / f"t{i}.gguf")
        shutil.copy(tiny.identical, copies[-1])
    threads = [threading.Thread(target=lib.add, args=(p,)) for p in copies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {p.name for p in copies} <= {e.path.name for e in lib.entries()}


def test_listing_reads_a_header_once_until_the_file_changes(
    lib: Library, tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import speculens.models.library as library

    copy = tmp_path / "m.gguf"
    shutil.copy(tiny.identical, copy)
    lib.add(copy)
    calls: list[Path] = []
    real = library.read_gguf_info

    def counting(path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
        calls.append(path)
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(library, "read_gguf_info", counting)
    for _ in range(3):
        assert {e.id: e.status for e in lib.entries()}["m"] is EntryStatus.OK
    assert len(calls) <= 1  # not once per listing
    os.truncate(copy, copy.stat().st_size - 10)
    assert {e.id: e.status for e in lib.entries()}["m"] is EntryStatus.DAMAGED  # a new version is read again
