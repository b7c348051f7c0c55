"""The hub client against a local HF-compatible server: search, list, download, resume, and every failure."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gguf_split import split_gguf
from hub_server import FakeHub, FakeHubServer, FakeRepo
from speculens.models import hub as hub_module
from speculens.models.gguf_info import format_bytes
from speculens.models.hub import (
    DownloadCancelled,
    DownloadProgress,
    HubClient,
    HubError,
    HubErrorKind,
    hub_folder,
)
from speculens.models.library import Library, SourceKind
from speculens.models.synthetic import TinyModelSpec, write_tiny_model

TOKEN = "hf_valid_test_token"


@dataclass
class HubFixture:
    """The running fake hub and the bytes it serves."""

    hub: FakeHub
    target: bytes
    draft: bytes
    split: tuple[bytes, bytes]


@pytest.fixture(scope="module")
def tiny_bytes(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes, tuple[bytes, bytes]]:
    """A tiny target (bigger than one download chunk, so a cut lands mid-file), a draft, and a split model."""
    folder = tmp_path_factory.mktemp("hub-models")
    target = write_tiny_model(folder / "t.gguf", TinyModelSpec(seed=3, n_embd=128, name="tiny-target"))
    draft = write_tiny_model(folder / "d.gguf", TinyModelSpec(seed=3, n_embd=64, name="tiny-draft"))
    first, second = split_gguf(draft, folder / "big.gguf", max_tensors=11)
    return target.read_bytes(), draft.read_bytes(), (first.read_bytes(), second.read_bytes())


@pytest.fixture()
def fake_hub(
    tiny_bytes: tuple[bytes, bytes, tuple[bytes, bytes]], monkeypatch: pytest.MonkeyPatch
) -> Iterator[HubFixture]:
    """A fake hub on 127.0.0.1, with ``HF_ENDPOINT`` pointing at it.

    huggingface_hub copies ``HF_ENDPOINT`` into ``constants.ENDPOINT`` at import time, which is long past
    here; :class:`HubClient` reads the variable when it is made and passes the endpoint explicitly to every
    huggingface_hub call, so setting the variable is enough (and is what a user does).
    """
    target, draft, split = tiny_bytes
    hub = FakeHub()
    hub.add(
        FakeRepo(
            "speculens-test/Tiny-Llama-GGUF",
            {
                "tiny-target-Q8_0.gguf": target,
                "tiny-draft-F32.gguf": draft,
                "big-00001-of-00002.gguf": split[0],
                "big-00002-of-00002.gguf": split[1],
                "README.md": b"# tiny\n",
            },
            downloads=50,
        )
    )
    hub.add(FakeRepo("speculens-test/Other-Tiny-GGUF", {"other-Q4_K_M.gguf": draft}, downloads=10))
    hub.add(FakeRepo("speculens-test/not-a-gguf-repo", {"model.safetensors": b"x"}, tags=["safetensors"]))
    hub.add(FakeRepo("speculens-test/Gated-GGUF", {"gated-Q4_0.gguf": draft}, gated=True))
    hub.tokens.add(TOKEN)
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    with FakeHubServer(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield HubFixture(hub, target, draft, split)


def client(**kwargs: object) -> HubClient:
    """A client that registers into a library without the demo models (they are not the point here)."""
    kwargs.setdefault("library", Library(include_demo=False))
    return HubClient(**kwargs)  # type: ignore[arg-type]


def test_endpoint_comes_from_hf_endpoint(fake_hub: HubFixture) -> None:
    assert HubClient().endpoint == fake_hub.hub.url


def test_search_finds_gguf_repos_only(fake_hub: HubFixture) -> None:
    repos = client().search("tiny")
    assert [r.repo_id for r in repos] == ["speculens-test/Tiny-Llama-GGUF", "speculens-test/Other-Tiny-GGUF"]
    assert repos[0].downloads == 50
    assert client().search("no-such-thing") == []
    assert [r.repo_id for r in client().search("gated")] == ["speculens-test/Gated-GGUF"]
    assert client().search("gated")[0].gated == "auto"


def test_list_files_groups_split_parts_with_sizes_and_quants(fake_hub: HubFixture) -> None:
    files = client().list_files("speculens-test/Tiny-Llama-GGUF")
    by_name = {f.filename: f for f in files}
    assert set(by_name) == {"big-00001-of-00002.gguf", "tiny-draft-F32.gguf", "tiny-target-Q8_0.gguf"}
    big = by_name["big-00001-of-00002.gguf"]
    assert big.parts == ("big-00001-of-00002.gguf", "big-00002-of-00002.gguf")
    assert big.size == len(fake_hub.split[0]) + len(fake_hub.split[1])
    target = by_name["tiny-target-Q8_0.gguf"]
    assert (target.size, target.quant) == (len(fake_hub.target), "Q8_0")
    assert target.sha256 == hashlib.sha256(fake_hub.target).hexdigest()
    assert by_name["tiny-draft-F32.gguf"].quant == "F32"


def test_full_download_is_verified_and_registered(fake_hub: HubFixture) -> None:
    reports: list[DownloadProgress] = []
    result = client().download(
        "speculens-test/Tiny-Llama-GGUF", "tiny-target-Q8_0.gguf", progress=reports.append
    )
    assert result.path == hub_folder("speculens-test/Tiny-Llama-GGUF") / "tiny-target-Q8_0.gguf"
    assert result.path.read_bytes() == fake_hub.target
    sha = hashlib.sha256(fake_hub.target).hexdigest()
    assert result.sha256 == {"tiny-target-Q8_0.gguf": sha}
    assert not list(result.path.parent.glob("*.part*"))
    assert reports[-1].phase == "done"
    assert reports[-1].downloaded == reports[-1].total == len(fake_hub.target)
    assert "verifying" in [r.phase for r in reports]
    entry = result.entry
    assert entry is not None
    assert entry.sha256 == sha
    assert entry.source.kind is SourceKind.HUB
    assert entry.source.repo == "speculens-test/Tiny-Llama-GGUF"
    assert entry.source.revision == fake_hub.hub.repos["speculens-test/Tiny-Llama-GGUF"].commit
    assert [e.id for e in Library(include_demo=False).entries()] == [entry.id]


def test_a_file_downloaded_before_is_checked_not_counted_as_a_transfer(fake_hub: HubFixture) -> None:
    client().download("speculens-test/Tiny-Llama-GGUF", "tiny-target-Q8_0.gguf")
    reports: list[DownloadProgress] = []
    again = client().download("speculens-test/Tiny-Llama-GGUF", "tiny-target-Q8_0.gguf", progress=reports.append)
    assert again.path.read_bytes() == fake_hub.target and "verifying" in [r.phase for r in reports]
    assert all(r.speed == 0 for r in reports)  # a tour's "12.9 TB/s": its bytes were never on the wire


def test_split_model_downloads_every_part(fake_hub: HubFixture) -> None:
    result = client().download("speculens-test/Tiny-Llama-GGUF", "big-00002-of-00002.gguf")
    assert result.path.name == "big-00001-of-00002.gguf"
    assert set(result.sha256) == {"big-00001-of-00002.gguf", "big-00002-of-00002.gguf"}
    assert result.path.read_bytes() == fake_hub.split[0]
    assert result.path.with_name("big-00002-of-00002.gguf").read_bytes() == fake_hub.split[1]
    assert result.entry is not None and result.entry.size == len(fake_hub.split[0]) + len(fake_hub.split[1])


def test_interrupted_download_resumes_with_a_range_request(fake_hub: HubFixture) -> None:
    name = "tiny-target-Q8_0.gguf"
    cut = len(fake_hub.target) // 2 + 12345
    fake_hub.hub.cut_once[name] = cut
    with pytest.raises(HubError) as err:
        client(retries=0).download("speculens-test/Tiny-Llama-GGUF", name)
    assert err.value.kind is HubErrorKind.NETWORK
    part = hub_folder("speculens-test/Tiny-Llama-GGUF") / (name + ".part")
    kept = part.stat().st_size
    assert 0 < kept <= cut  # what arrived before the cut is kept ...
    assert Library(include_demo=False).entries() == []  # ... but never registered
    assert not part.with_name(name).exists()

    result = client().download("speculens-test/Tiny-Llama-GGUF", name)
    assert fake_hub.hub.ranges(name) == [None, f"bytes={kept}-"]
    assert result.path.read_bytes() == fake_hub.target
    assert not part.exists()
    assert result.entry is not None


def test_a_dropped_connection_is_resumed_within_one_call(fake_hub: HubFixture) -> None:
    name = "tiny-draft-F32.gguf"
    fake_hub.hub.cut_once[name] = len(fake_hub.draft) // 3
    result = client(retries=2).download("speculens-test/Tiny-Llama-GGUF", name)
    ranges = fake_hub.hub.ranges(name)
    assert len(ranges) == 2 and ranges[1] is not None and ranges[1].startswith("bytes=")
    assert result.path.read_bytes() == fake_hub.draft


def test_cancel_keeps_the_partial_file_for_resume(fake_hub: HubFixture) -> None:
    name = "tiny-target-Q8_0.gguf"
    cancel = threading.Event()
    hub_module_chunk = hub_module.CHUNK_SIZE
    assert len(fake_hub.target) > 2 * hub_module_chunk, "the file must span several chunks"

    def on_progress(p: DownloadProgress) -> None:
        if p.phase == "downloading" and p.downloaded > 0:
            cancel.set()

    with pytest.raises(DownloadCancelled):
        client().download("speculens-test/Tiny-Llama-GGUF", name, progress=on_progress, cancel=cancel)
    part = hub_folder("speculens-test/Tiny-Llama-GGUF") / (name + ".part")
    assert 0 < part.stat().st_size < len(fake_hub.target)
    assert Library(include_demo=False).entries() == []
    result = client().download("speculens-test/Tiny-Llama-GGUF", name)
    assert result.path.read_bytes() == fake_hub.target


def test_corrupted_file_is_rejected_and_deleted(fake_hub: HubFixture) -> None:
    name = "tiny-target-Q8_0.gguf"
    fake_hub.hub.corrupt.add(name)
    with pytest.raises(HubError) as err:
        client().download("speculens-test/Tiny-Llama-GGUF", name)
    assert err.value.kind is HubErrorKind.CHECKSUM
    assert "checksum mismatch" in str(err.value)
    folder = hub_folder("speculens-test/Tiny-Llama-GGUF")
    assert not folder.exists()  # nor an empty folder made for it (a tour's)
    assert Library(include_demo=False).entries() == []


def test_unknown_repo_and_unknown_file_are_not_found(fake_hub: HubFixture) -> None:
    with pytest.raises(HubError) as err:
        client().list_files("speculens-test/nope")
    assert err.value.kind is HubErrorKind.NOT_FOUND
    assert "repository not found" in str(err.value)
    with pytest.raises(HubError) as err:
        client().download("speculens-test/Tiny-Llama-GGUF", "missing-Q4_0.gguf")
    assert err.value.kind is HubErrorKind.NOT_FOUND
    assert "no such file" in str(err.value)
    assert Library(include_demo=False).entries() == []


def test_gated_repo_needs_a_token(fake_hub: HubFixture) -> None:
    with pytest.raises(HubError) as err:
        client().download("speculens-test/Gated-GGUF", "gated-Q4_0.gguf")
    assert err.value.kind is HubErrorKind.GATED
    assert "token" in str(err.value)
    with pytest.raises(HubError) as err:
        client(token="hf_wrong").list_files("speculens-test/Gated-GGUF")
    assert err.value.kind is HubErrorKind.UNAUTHORIZED
    # The hub's own reason, and what to check (a tour read "missing, invalid, or lacks permission").
    assert "(401: Invalid credentials in Authorization header). Check the access token" in str(err.value)
    result = client(token=TOKEN).download("speculens-test/Gated-GGUF", "gated-Q4_0.gguf")
    assert result.path.read_bytes() == fake_hub.draft
    sent = [h.get("authorization") for m, p, h in fake_hub.hub.requests if "/resolve/" in p and m == "GET"]
    assert sent[-1] == f"Bearer {TOKEN}"


def test_offline_mode_makes_no_request(fake_hub: HubFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    before = len(fake_hub.hub.requests)
    with pytest.raises(HubError) as err:
        client(offline=True).search("tiny")
    assert err.value.kind is HubErrorKind.OFFLINE
    assert str(err.value).startswith("Searching the hub for 'tiny': offline mode is on")  # a sentence, capitalised
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError) as err:
        client().download("speculens-test/Tiny-Llama-GGUF", "tiny-target-Q8_0.gguf")
    assert err.value.kind is HubErrorKind.OFFLINE
    assert len(fake_hub.hub.requests) == before


def test_no_network_is_a_clear_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(HubError) as err:
        client(endpoint=f"http://127.0.0.1:{port}").search("tiny")
    assert err.value.kind is HubErrorKind.NETWORK
    assert "cannot reach" in str(err.value)


def test_disk_full_is_detected_before_downloading(
    fake_hub: HubFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Usage:
        free = 1000

    monkeypatch.setattr(hub_module.shutil, "disk_usage", lambda _p: Usage())
    with pytest.raises(HubError) as err:
        client().download("speculens-test/Tiny-Llama-GGUF", "tiny-target-Q8_0.gguf")
    assert err.value.kind is HubErrorKind.DISK_FULL
    assert not [p for p in fake_hub.hub.requests if p[0] == "GET" and "/resolve/" in p[1]]
    assert Library(include_demo=False).entries() == []


def test_disk_full_while_writing_keeps_nothing_registered(
    fake_hub: HubFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import errno

    real_open = Path.open

    class FullFile:
        def __init__(self, f: object) -> None:
            self.f = f

        def __enter__(self) -> FullFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()  # type: ignore[attr-defined]

        def seek(self, n: int) -> None:
            pass

        def truncate(self) -> None:
            pass

        def write(self, _b: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    def fake_open(self: Path, mode: str = "r", *args: object, **kwargs: object) -> object:
        f = real_open(self, mode, *args, **kwargs)  # type: ignore[call-overload]
        return FullFile(f) if self.name.endswith(".part") and "b" in mode and "r" not in mode else f

    monkeypatch.setattr(Path, "open", fake_open)
    with pytest.raises(HubError) as err:
        client().download("speculens-test/Tiny-Llama-GGUF", "tiny-draft-F32.gguf")
    assert err.value.kind is HubErrorKind.DISK_FULL
    assert Library(include_demo=False).entries() == []


def test_cli_search_files_download(fake_hub: HubFixture, capsys: pytest.CaptureFixture[str]) -> None:
    from speculens.cli.__main__ import main

    assert main(["models", "search", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "speculens-test/Tiny-Llama-GGUF" in out and "not-a-gguf" not in out
    assert "UPDATED" in out.splitlines()[0] and "2025-01-02" in out  # when it last changed, as the app says
    assert main(["models", "files", "speculens-test/Tiny-Llama-GGUF", "--json"]) == 0
    files = json.loads(capsys.readouterr().out)
    assert {f["filename"] for f in files} >= {"tiny-target-Q8_0.gguf", "big-00001-of-00002.gguf"}
    assert (
        main(["models", "download", "speculens-test/Tiny-Llama-GGUF", "tiny-draft-F32.gguf", "--json"]) == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["sha256"]["tiny-draft-F32.gguf"] == hashlib.sha256(fake_hub.draft).hexdigest()
    assert result["entry"]["source"]["repo"] == "speculens-test/Tiny-Llama-GGUF"
    assert main(["models", "files", "speculens-test/nope"]) == 1
    assert "repository not found" in capsys.readouterr().err
    assert main(["models", "download", "speculens-test/Gated-GGUF", "gated-Q4_0.gguf", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["kind"] == "gated" and "gated" in captured.err
    assert main(["models", "search", "tiny", "--offline"]) == 1
    assert "offline mode" in capsys.readouterr().err


def test_the_cli_says_where_a_resumed_download_goes_on_from(
    fake_hub: HubFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tour's resume read "618 kB/s, 583 s left" and nothing of the 131 MB already on disk."""
    from speculens.cli.__main__ import main

    name = "tiny-target-Q8_0.gguf"
    fake_hub.hub.cut_once[name] = len(fake_hub.target) // 2
    with pytest.raises(HubError):
        client(retries=0).download("speculens-test/Tiny-Llama-GGUF", name)
    kept = (hub_folder("speculens-test/Tiny-Llama-GGUF") / (name + ".part")).stat().st_size
    assert main(["models", "download", "speculens-test/Tiny-Llama-GGUF", name]) == 0
    err = capsys.readouterr().err
    assert f"resuming {name} from {format_bytes(kept)} of {format_bytes(len(fake_hub.target))}" in err, err
    assert err.count("resuming") == 1
    # A fresh download (several chunks long) resumes nothing, whatever its first report says.
    assert main(["models", "download", "speculens-test/Tiny-Llama-GGUF", "tiny-draft-F32.gguf"]) == 0
    err = capsys.readouterr().err
    assert "done tiny-draft-F32.gguf" in err and "resuming" not in err, err
