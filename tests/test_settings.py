"""Settings, Qt-free: the file format (round trip, tolerance, corrupt-file backup), ranges, reload fields."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from speculens import paths
from speculens.engine.config import FlashAttention
from speculens.settings import (
    SCHEMA_VERSION,
    Settings,
    load_settings,
    model_config,
    read_settings,
    save_settings,
)


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    settings = Settings(
        strategy="ngram-cache",
        n_draft=12,
        adaptive=False,
        n_draft_min=2,
        p_min=0.5,
        temperature=0.7,
        top_k=20,
        top_p=0.9,
        min_p=0.1,
        seed=42,
        max_tokens=99,
        n_ctx=8192,
        threads=3,
        n_gpu_layers=-1,
        n_gpu_layers_draft=10,
        ngram_map_path="/maps/code.npz",
        target_path="/m/t.gguf",
        draft_path="/m/d.gguf",
        system_prompt="be brief",
    )
    path = save_settings(settings, tmp_path / "settings.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema_version"] == SCHEMA_VERSION
    assert load_settings(path) == settings


def test_default_location_honours_speculens_home(speculens_home: Path) -> None:
    save_settings(Settings(n_draft=5))
    assert paths.settings_file().is_relative_to(speculens_home)
    assert load_settings().n_draft == 5


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    assert load_settings(tmp_path / "nope.json") == Settings()


def test_unknown_missing_and_bad_values_are_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps(
            {
                "schema_version": 99,
                "n_draft": 500,  # out of range -> default
                "temperature": "hot",  # wrong type -> default
                "top_k": 8.0,  # an integral float is fine
                "seed": True,  # a bool is not an int here
                "strategy": "telepathy",  # unknown strategy -> default
                "threads": 4,
                "from_the_future": {"x": 1},
            }
        ),
        encoding="utf-8",
    )
    s = load_settings(path)
    default = Settings()
    assert (s.n_draft, s.temperature, s.top_k, s.seed, s.strategy, s.threads) == (
        default.n_draft, default.temperature, 8, default.seed, default.strategy, 4
    )  # fmt: skip


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"", b"\x00\x01binary", b'{"schema_version": 3, garbage\x00\xff', b"[1, 2, 3]"],
    ids=["not-json", "empty", "binary", "not-utf-8", "not-an-object"],
)
def test_corrupt_file_is_backed_up_and_defaults_used(tmp_path: Path, content: bytes) -> None:
    """A damaged file gives the defaults, is kept beside them, and is said to the user (a tour's file that was not
    UTF-8 stopped the app at start; one that was not JSON reset every setting without a word)."""
    path = tmp_path / "settings.json"
    path.write_bytes(content)
    settings, said = read_settings(path)
    backup = tmp_path / "settings.json.corrupt"
    assert settings == Settings() and "damaged" in said and f"kept as {backup}" in said
    assert backup.read_bytes() == content
    save_settings(Settings(n_draft=3), path)
    assert read_settings(path) == (Settings(n_draft=3), "") and backup.exists()


def test_a_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows' Notepad saves UTF-8 with a BOM: a settings file edited there is not damaged."""
    path = tmp_path / "settings.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"schema_version": SCHEMA_VERSION, "n_draft": 3}).encode())
    assert read_settings(path) == (Settings(n_draft=3), "")


def test_atomic_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    for i in range(3):
        save_settings(Settings(seed=i), tmp_path / "settings.json")
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_reload_fields() -> None:
    base = Settings(target_path="/t.gguf")
    assert base.needs_reload(Settings(target_path="/t.gguf", temperature=1.0, n_draft=3)) == set()
    assert base.needs_reload(Settings(target_path="/t.gguf", n_ctx=1024, threads=2)) == {"n_ctx", "threads"}


def test_switching_to_a_draft_free_strategy_needs_a_reload_only_when_the_draft_was_loaded() -> None:
    loaded = Settings(target_path="/t.gguf", draft_path="/d.gguf", strategy="draft")
    assert Settings(target_path="/t.gguf", draft_path="/d.gguf", strategy="lookup").needs_reload(loaded) == {
        "strategy"
    }
    assert Settings(target_path="/t.gguf", draft_path="/d.gguf", strategy="auto").needs_reload(loaded) == set()


def test_an_answer_needs_a_reload_for_a_draft_it_would_use_not_for_one_left_idle() -> None:
    draft_free = Settings(target_path="/t.gguf", draft_path="/d.gguf", strategy="lookup")
    with_draft = Settings(target_path="/t.gguf", draft_path="/d.gguf", strategy="auto")
    assert with_draft.needs_reload_to_answer(draft_free) == {"strategy"}  # the draft is not loaded
    assert draft_free.needs_reload_to_answer(with_draft) == set()  # it is, and just goes unused
    assert replace(draft_free, n_ctx=1024).needs_reload_to_answer(with_draft) == {"n_ctx"}
    # The draft's GPU layers changed while no draft is used, or loaded: nothing to reload (a review's finding).
    assert replace(draft_free, n_gpu_layers_draft=0).needs_reload(draft_free) == set()


def test_changed_settings_are_named_as_a_sentence() -> None:
    from speculens.settings import field_labels

    assert field_labels({"n_ctx"}) == "context size"
    assert field_labels({"threads", "n_ctx"}) == "context size and threads"
    assert field_labels({"n_gpu_layers_draft", "n_gpu_layers", "n_ctx"}) == (
        "context size, GPU layers (target) and GPU layers (draft)"
    )


def test_one_table_of_ranges_agrees_with_the_engine() -> None:
    from speculens.engine.config import DEFAULT_N_CTX, MAX_N_DRAFT, MIN_N_CTX
    from speculens.engine.sampling import MAX_TEMPERATURE
    from speculens.settings import SPECS

    assert SPECS["temperature"].high == MAX_TEMPERATURE
    assert SPECS["n_ctx"].low == MIN_N_CTX and Settings().n_ctx == DEFAULT_N_CTX
    assert SPECS["n_draft"].high == MAX_N_DRAFT
    too_hot = Settings(temperature=MAX_TEMPERATURE + 1, n_ctx=MIN_N_CTX - 1).validated()
    assert too_hot.temperature == Settings().temperature and too_hot.n_ctx == DEFAULT_N_CTX


def test_random_seed_is_the_default_and_old_files_move_to_it(tmp_path: Path) -> None:
    from speculens.settings import generation_config

    assert Settings().seed == -1 and generation_config(Settings()).sampling.seed is None
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"schema_version": 1, "seed": 0, "strategy": "draft"}), encoding="utf-8")
    old = load_settings(path)
    assert old.seed == -1 and old.strategy == "auto"
    path.write_text(json.dumps({"schema_version": 2, "seed": 0}), encoding="utf-8")
    assert load_settings(path).seed == 0  # a seed the user chose stays


def test_gpu_layers_default_to_all_and_old_files_move_to_it(tmp_path: Path) -> None:
    # Up to schema 2 the default was 0 (no layer on the GPU) and the file kept it: on a CUDA or Metal build a
    # user who never touched it decoded on the CPU.
    assert Settings().n_gpu_layers == -1 and Settings().n_gpu_layers_draft == -1
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"schema_version": 2, "n_gpu_layers": 0, "n_gpu_layers_draft": 12}), "utf-8")
    old = load_settings(path)
    assert old.n_gpu_layers == -1 and old.n_gpu_layers_draft == 12
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "n_gpu_layers": 0}), encoding="utf-8")
    assert load_settings(path).n_gpu_layers == 0  # chosen since: it stays


def test_flash_attention_is_a_loading_setting_with_a_known_value(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"flash_attn": "sometimes"}), encoding="utf-8")
    assert load_settings(path).flash_attn == "auto"
    path.write_text(json.dumps({"flash_attn": "off", "target_path": "/t.gguf"}), encoding="utf-8")
    loaded = load_settings(path)
    assert model_config(loaded).flash_attn is FlashAttention.OFF
    assert Settings(target_path="/t.gguf").needs_reload(loaded) == {"flash_attn"}


def test_model_paths_are_kept_as_the_library_keeps_them(tmp_path: Path) -> None:
    """A path typed into settings.json with ``..`` or through a link names the same library entry: the Models
    window compares the settings' paths with the library's, which are resolved."""
    (tmp_path / "models").mkdir()
    model = tmp_path / "models" / "t.gguf"
    model.write_bytes(b"GGUF")
    (tmp_path / "link").symlink_to(tmp_path / "models")
    path = tmp_path / "settings.json"
    typed = {"target_path": str(tmp_path / "link" / "t.gguf"), "draft_path": f"{tmp_path}/models/../models/t.gguf"}
    path.write_text(json.dumps(typed), encoding="utf-8")
    settings = load_settings(path)
    assert settings.target_path == settings.draft_path == str(model.resolve())
    assert Settings().validated().target_path == ""  # none chosen stays none
