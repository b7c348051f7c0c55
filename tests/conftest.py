"""Shared fixtures: tiny generated GGUF models and an isolated Speculens home per test."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from speculens.models.synthetic import TinyModelSpec, write_tiny_model, write_tiny_pair


@dataclass(frozen=True)
class TinyModels:
    """Paths of the tiny model family.

    Attributes:
        target: the target.
        identical: a draft with the target's weights (acceptance 1 in greedy mode).
        perturbed: a noisy copy of the target (partial acceptance).
        mismatch: a draft with a shuffled vocabulary (refused for draft-model speculation).
        folder: where they live.
    """

    target: Path
    identical: Path
    perturbed: Path
    mismatch: Path
    folder: Path


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """The tiny models, written once per test session."""
    folder = tmp_path_factory.mktemp("tiny-models")
    target, identical = write_tiny_pair(folder, "identical")
    _, perturbed = write_tiny_pair(folder, "perturbed")
    _, mismatch = write_tiny_pair(folder, "mismatch")
    return TinyModels(target, identical, perturbed, mismatch, folder)


@pytest.fixture()
def tiny_model_factory(tmp_path: Path):
    """Write a custom tiny model: ``factory(name, **spec_fields) -> Path``."""

    def make(name: str, **fields: object) -> Path:
        return write_tiny_model(tmp_path / f"{name}.gguf", TinyModelSpec(**fields))  # type: ignore[arg-type]

    return make


@pytest.fixture(autouse=True)
def speculens_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty Speculens home, so nothing touches the user's real files."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("SPECULENS_HOME", str(home))
    return home
