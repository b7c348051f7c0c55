"""The catalog of recommended target/draft pairs (``resources/catalog.json``).

Each pair names the hub repository and file of both models, their approximate sizes, and why the draft
works for the target. The catalog is read with :mod:`importlib.resources` from the ``speculens.resources``
package (the top-level ``resources/`` folder, mapped by ``pyproject.toml``), so it is found in an
installed wheel and in a frozen build; a development checkout whose editable install predates that
mapping falls back to the folder itself.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speculens.errors import OperationError
from speculens.models.gguf_info import GGUFInfo

CATALOG_FILE = "catalog.json"


class CatalogError(OperationError):
    """The catalog file is missing or damaged (a packaging bug, not a user error)."""


@dataclass(frozen=True)
class CatalogModel:
    """One model file on the hub.

    Attributes:
        repo: the hub repository.
        file: the GGUF file's name in it.
        size: approximate size in bytes (the hub listing has the exact one).
        params: parameter count label (``1.5B``).
        quant: quantization label (``Q4_K_M``).
    """

    repo: str
    file: str
    size: int
    params: str
    quant: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CatalogModel:
        """Parse one catalog record."""
        return cls(
            str(data["repo"]), str(data["file"]), int(data["size"]), str(data["params"]), str(data["quant"])
        )


@dataclass(frozen=True)
class CatalogPair:
    """A recommended pair.

    Attributes:
        id: stable identifier.
        family: model family (matches :attr:`GGUFInfo.family` of the target).
        scale: ``small`` (runs on a laptop CPU) or ``large``.
        title: readable name.
        target: the target model.
        draft: the draft model.
        tokenizer: the shared tokenizer, in words.
        why: why the draft works for this target.
    """

    id: str
    family: str
    scale: str
    title: str
    target: CatalogModel
    draft: CatalogModel
    tokenizer: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "id": self.id,
            "family": self.family,
            "scale": self.scale,
            "title": self.title,
            "target": vars(self.target),
            "draft": vars(self.draft),
            "tokenizer": self.tokenizer,
            "why": self.why,
        }


def _read_text() -> str:
    try:
        return (importlib.resources.files("speculens.resources") / CATALOG_FILE).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        source_tree = Path(__file__).resolve().parents[3] / "resources" / CATALOG_FILE
        try:
            return source_tree.read_text(encoding="utf-8")
        except OSError as exc:
            raise CatalogError(f"the model catalog {CATALOG_FILE} is missing from this installation") from exc


@functools.cache
def load_catalog() -> tuple[CatalogPair, ...]:
    """All recommended pairs, in the catalog's order.

    Raises:
        CatalogError: the catalog is missing or damaged.
    """
    try:
        data = json.loads(_read_text())
        return tuple(
            CatalogPair(
                id=str(p["id"]),
                family=str(p["family"]),
                scale=str(p["scale"]),
                title=str(p["title"]),
                target=CatalogModel.from_dict(p["target"]),
                draft=CatalogModel.from_dict(p["draft"]),
                tokenizer=str(p["tokenizer"]),
                why=str(p["why"]),
            )
            for p in data["pairs"]
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CatalogError(f"the model catalog is damaged: {exc}") from exc


def pairs_for_target(
    info: GGUFInfo | None = None, *, repo: str | None = None, filename: str | None = None
) -> list[CatalogPair]:
    """Catalog pairs whose target is this model: the same hub file first, then the same family.

    Args:
        info: the target's metadata (its family is compared).
        repo: the target's hub repository, if known (from the library).
        filename: the target's file name.

    Returns:
        Matching pairs, exact file matches first.
    """
    exact: list[CatalogPair] = []
    family: list[CatalogPair] = []
    name = filename or (info.path.name if info is not None else None)
    for pair in load_catalog():
        same_file = name is not None and pair.target.file.lower() == name.lower()
        if same_file and (repo is None or pair.target.repo.lower() == repo.lower()):
            exact.append(pair)
        elif info is not None and pair.family == info.family:
            family.append(pair)
    return exact + family
