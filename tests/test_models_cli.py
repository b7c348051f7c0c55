"""``speculens-cli models``: human output, ``--json`` for scripts, clear errors and exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from speculens.cli.__main__ import main
from speculens.models import demo


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process; returns (exit status, stdout, stderr)."""
    rc = main(["models", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(autouse=True)
def no_demo_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the library listing about the models each test adds."""
    monkeypatch.setattr(demo, "DEMO_MODELS", ())


def test_info_human_and_json(capsys: pytest.CaptureFixture[str], tiny) -> None:
    rc, out, _ = run(capsys, "info", str(tiny.target))
    assert rc == 0
    assert "Vocabulary      996 tokens" in out and "Quantization    F32" in out and "llama" in out
    rc, out, _ = run(capsys, "info", str(tiny.target), "--json")
    data = json.loads(out)
    assert rc == 0 and data["tokenizer"]["n_vocab"] == 996 and data["architecture"] == "llama"


def test_info_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = run(capsys, "info", str(tmp_path / "nope.gguf"))
    assert rc == 1 and out == "" and err.startswith("error: no model file")
    bad = tmp_path / "bad.gguf"
    bad.write_text("hello")
    rc, out, err = run(capsys, "info", str(bad), "--json")
    assert rc == 1 and "not a GGUF model file" in err
    assert json.loads(out)["kind"] == "GGUFError"


def test_import_list_and_resolve_by_id(capsys: pytest.CaptureFixture[str], tiny, tmp_path: Path) -> None:
    rc, out, _ = run(capsys, "list")
    assert rc == 0 and "library is empty" in out
    copy = tmp_path / "mine.gguf"
    shutil.copy(tiny.target, copy)
    rc, out, _ = run(capsys, "import", str(copy), "--sha256")
    assert rc == 0 and "added mine" in out
    rc, out, _ = run(capsys, "list", "--json")
    [entry] = json.loads(out)
    assert (entry["id"], entry["status"], entry["source"]["kind"]) == ("mine", "ok", "local")
    assert len(entry["sha256"]) == 64
    rc, out, _ = run(capsys, "info", "mine", "--json")  # library ids work wherever a model is named
    assert rc == 0 and json.loads(out)["path"] == str(copy.resolve())
    copy.unlink()
    rc, out, _ = run(capsys, "list")
    assert rc == 0 and "missing" in out
    # What to do, by name (a README walk imported the moved file again and kept the old entry, missing, beside it).
    assert "1 model file is missing (moved or deleted): mine. " in out and "models remove mine" in out
    rc, _, err = run(capsys, "info", "mine")
    assert rc == 1 and "its file is missing" in err
    rc, out, _ = run(capsys, "remove", "mine")  # as the advice says; "its file stays at" would not be true
    assert rc == 0 and "its file was already gone" in out


def test_scan(capsys: pytest.CaptureFixture[str], tiny, tmp_path: Path) -> None:
    folder = tmp_path / "scan"
    folder.mkdir()
    shutil.copy(tiny.target, folder / "t.gguf")
    (folder / "x.gguf").write_text("junk")
    rc, out, err = run(capsys, "scan", str(folder))
    assert rc == 0 and "1 added, 0 already known, 1 skipped" in out and "x.gguf" in err
    rc, out, _ = run(capsys, "scan", str(folder), "--json")
    assert json.loads(out)["known"] == ["t"]
    rc, _, err = run(capsys, "scan", str(tmp_path / "nope"))
    assert rc == 1 and "not a folder" in err


def test_check_pair_exit_codes(capsys: pytest.CaptureFixture[str], tiny) -> None:
    rc, out, _ = run(capsys, "check-pair", str(tiny.target), str(tiny.identical))
    assert rc == 0 and "Compatible" in out
    rc, out, _ = run(capsys, "check-pair", str(tiny.target), str(tiny.mismatch))
    assert rc == 3
    assert "Tokenizer mismatch" in out and "ERROR    Token texts" in out
    rc, out, _ = run(capsys, "check-pair", str(tiny.target), str(tiny.mismatch), "--json")
    data = json.loads(out)
    assert rc == 3 and data["compatible"] is False and data["first_difference"]["token_id"] >= 5


def test_suggest_and_catalog(capsys: pytest.CaptureFixture[str], tiny) -> None:
    rc, out, _ = run(capsys, "suggest", str(tiny.target), "--json")
    assert rc == 0 and json.loads(out) == []
    rc, out, _ = run(capsys, "catalog", "--json")
    assert rc == 0 and len(json.loads(out)) >= 8
    rc, out, _ = run(capsys, "catalog")
    assert "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF" in out


def test_demo_without_the_extra(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "demo")
    assert rc == 1 and "pip install 'speculens[demo]'" in err


def test_a_demo_model_built_on_first_use_is_said_and_listed_as_not_built_before(
    capsys: pytest.CaptureFixture[str], tiny, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tour ran ``models check-pair qwen-1.5b gemma-270m`` in a fresh home: 1.4 GB of files appeared and nothing
    said so; and ``models list`` said "not-assembled" where the app says "Not built yet"."""
    import hashlib

    data = tiny.target.read_bytes()
    fake = demo.DemoModel("tiny-demo", "Tiny Demo", "target", "tiny-demo.gguf", ("tiny_demo_chunk",), len(data),
                          hashlib.sha256(data).hexdigest(), "someone/tiny")
    monkeypatch.setattr(demo, "DEMO_MODELS", (fake,))
    monkeypatch.setattr(demo, "is_installed", lambda model: True)
    monkeypatch.setattr(demo, "chunk_files", lambda model: [tiny.target])
    rc, out, _ = run(capsys, "list")
    assert rc == 0 and "not-built" in out and "not-assembled" not in out
    assert "built from their packages on first use, or now with: models demo" in out
    rc, out, err = run(capsys, "info", "tiny-demo")
    assert rc == 0 and "built the demo model Tiny Demo" in err, err
    rc, out, err = run(capsys, "info", "tiny-demo")  # built already: nothing to say
    assert rc == 0 and "built" not in err


def test_remove_forgets_a_model_and_deletes_only_a_file_speculens_made(
    capsys: pytest.CaptureFixture[str], tiny, tmp_path: Path
) -> None:
    """From a new-user tour: the CLI downloaded models but had no way to remove one (the app has Remove from
    library)."""
    from speculens import paths

    mine = tmp_path / "mine.gguf"
    shutil.copy(tiny.target, mine)
    ours = paths.models_dir() / "hub" / "someone__Tiny" / "ours.gguf"
    ours.parent.mkdir(parents=True)
    shutil.copy(tiny.target, ours)
    for path in (mine, ours):
        assert run(capsys, "import", str(path))[0] == 0
    rc, out, _ = run(capsys, "remove", "mine", "--delete-file")  # imported from elsewhere: the user's file, kept
    assert rc == 0 and f"its file stays at {mine}" in out and mine.exists()
    rc, out, _ = run(capsys, "remove", "ours")  # in Speculens' folder, but kept unless asked
    assert rc == 0 and ours.exists()
    assert run(capsys, "import", str(ours))[0] == 0
    rc, out, _ = run(capsys, "remove", "ours", "--delete-file", "--json")
    assert rc == 0 and json.loads(out)["file_deleted"] is True and not ours.exists()
    rc, out, _ = run(capsys, "list")
    assert "library is empty" in out
    rc, _, err = run(capsys, "remove", "nothing-like-it")
    assert rc == 1 and "no model 'nothing-like-it' in the library" in err
