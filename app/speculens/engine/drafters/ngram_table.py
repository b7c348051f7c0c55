"""Counts of which token follows which n-gram, saved as a compact ``.npz`` file.

One structure serves the n-gram cache (context statistics, plus a dynamic table that grows across runs)
and the static n-gram map built from a corpus. Token ids only mean something for one vocabulary, so a
saved table records the vocabulary's fingerprint and refuses to load for another.
"""

from __future__ import annotations

import zipfile
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from speculens.atomic import write_atomic
from speculens.errors import InvalidInputError

FORMAT_VERSION = 1


class NgramTableError(InvalidInputError):
    """A table file is unreadable or belongs to another vocabulary."""


# What a damaged or foreign .npz raises from numpy's reader (a truncated file: a bad zip, or a short one).
_NOT_A_MAP = (KeyError, ValueError, IndexError, TypeError, AttributeError, EOFError, zipfile.BadZipFile, zlib.error)


@contextmanager
def _reading(path: Path) -> Iterator[Any]:
    """``np.load(path)``, where whatever goes wrong reading the file (or a part it lacks) is an
    :class:`NgramTableError` in words: a damaged map named in the settings must not stop the app from starting.

    Raises:
        NgramTableError: missing, unreadable, damaged, or not an n-gram map.
    """
    try:
        # The file opened here, not by numpy, which leaves it open when the zip inside is damaged.
        with open(path, "rb") as fid, np.load(fid, allow_pickle=False) as data:
            yield data
    except NgramTableError:  # said in words already (a ValueError too)
        raise
    except OSError as exc:
        raise NgramTableError(f"cannot read n-gram file {path}: {exc.strerror or exc}") from exc
    except _NOT_A_MAP as exc:
        # The app and the CLI each say how to build one (a tour read CLI syntax in the app's Settings).
        raise NgramTableError(f"{path.name} is not an n-gram map: build one from your own files") from exc


class NgramTable:
    """n-gram → Counter of following tokens, for n in ``[ngram_min, ngram_max]``.

    Args:
        ngram_min: shortest n-gram counted.
        ngram_max: longest n-gram counted.
    """

    def __init__(self, ngram_min: int = 1, ngram_max: int = 4) -> None:
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.counts: dict[tuple[int, ...], Counter[int]] = {}

    def __len__(self) -> int:
        return len(self.counts)

    def add(self, tokens: Sequence[int], start: int = 0) -> None:
        """Count every n-gram → next-token pair whose next token is at index ``start`` or later."""
        for i in range(max(start, 1), len(tokens)):
            nxt = tokens[i]
            for n in range(self.ngram_min, min(self.ngram_max, i) + 1):
                key = tuple(tokens[i - n : i])
                counter = self.counts.get(key)
                if counter is None:
                    counter = self.counts[key] = Counter()
                counter[nxt] += 1

    def merge(self, other: NgramTable) -> None:
        """Add another table's counts to this one."""
        for key, counter in other.counts.items():
            mine = self.counts.get(key)
            if mine is None:
                self.counts[key] = Counter(counter)
            else:
                mine.update(counter)

    def best(self, context: Sequence[int], min_count: Sequence[int], min_ratio: Sequence[float]) -> int | None:
        """The most frequent continuation of the longest matching suffix that clears the thresholds.

        Args:
            context: the tokens so far.
            min_count: per n-gram length (index 0 = ``ngram_min``), the least number of observations.
            min_ratio: per n-gram length, the least share the top continuation must have.
        """
        for n in range(min(self.ngram_max, len(context)), self.ngram_min - 1, -1):
            counter = self.counts.get(tuple(context[-n:]))
            if not counter:
                continue
            token, count = max(counter.items(), key=lambda kv: kv[1])
            total = sum(counter.values())
            k = n - self.ngram_min
            if (
                total >= min_count[min(k, len(min_count) - 1)]
                and count >= min_ratio[min(k, len(min_ratio) - 1)] * total
            ):
                return token
        return None

    def prune(self, min_total: int) -> None:
        """Drop n-grams seen fewer than ``min_total`` times (keeps maps small)."""
        self.counts = {k: c for k, c in self.counts.items() if sum(c.values()) >= min_total}

    # ---- files ------------------------------------------------------------------------------------------

    def save(self, path: Path, fingerprint: str) -> None:
        """Write atomically (temporary file, then rename)."""
        arrays: dict[str, Any] = {
            "meta": np.array([FORMAT_VERSION, self.ngram_min, self.ngram_max], dtype=np.int64),
            "fingerprint": np.array(fingerprint),
        }
        for n in range(self.ngram_min, self.ngram_max + 1):
            rows = [(k, t, c) for k, counter in self.counts.items() if len(k) == n for t, c in counter.items()]
            arrays[f"keys{n}"] = np.array([k for k, _, _ in rows], dtype=np.int32).reshape(len(rows), n)
            arrays[f"next{n}"] = np.array([t for _, t, _ in rows], dtype=np.int32)
            arrays[f"count{n}"] = np.array([c for _, _, c in rows], dtype=np.int32)
        write_atomic(path, lambda f: np.savez_compressed(f, **arrays))

    @staticmethod
    def check(path: Path) -> None:
        """Whether a file is an n-gram map this version reads, from its header alone (a moment, where :meth:`load`
        reads it all, after the models it is built for have loaded).

        Raises:
            NgramTableError: missing, unreadable, not an n-gram map, or of another version.
        """
        with _reading(path) as data:
            version = int(data["meta"][0])
        if version != FORMAT_VERSION:
            raise NgramTableError(f"{path.name}: unsupported n-gram file version {version}; build it again")

    @staticmethod
    def fingerprint_of(path: Path) -> str:
        """The vocabulary fingerprint a map file was built for (read from its header: a moment).

        Raises:
            NgramTableError: missing, unreadable, not an n-gram map, or of another version.
        """
        NgramTable.check(path)
        with _reading(path) as data:
            return str(data["fingerprint"])

    @staticmethod
    def summary(path: Path) -> dict[str, Any]:
        """What a map file holds, without building its table: its longest and shortest n-gram, how many n-grams
        (as ``ngram build`` counts them), the vocabulary fingerprint it is for, and its size in bytes.

        Raises:
            NgramTableError: missing, unreadable, not an n-gram map, or of another version.
        """
        NgramTable.check(path)
        with _reading(path) as data:
            _, nmin, nmax = (int(x) for x in data["meta"])
            n_ngrams = sum(len(np.unique(data[f"keys{n}"], axis=0)) for n in range(nmin, nmax + 1))
            fingerprint = str(data["fingerprint"])
        return {"path": str(path), "bytes": path.stat().st_size, "ngram_min": nmin, "ngram_max": nmax,
                "n_ngrams": n_ngrams, "fingerprint": fingerprint}  # fmt: skip

    @classmethod
    def load(cls, path: Path, fingerprint: str | None) -> NgramTable:
        """Read a table; with ``fingerprint`` given, refuse one made for another vocabulary.

        Raises:
            NgramTableError: unreadable, wrong version, or wrong vocabulary.
        """
        cls.check(path)
        with _reading(path) as data:
            _, nmin, nmax = (int(x) for x in data["meta"])
            if fingerprint is not None and str(data["fingerprint"]) != fingerprint:
                raise NgramTableError(another_tokenizer(path))
            table = cls(nmin, nmax)
            for n in range(nmin, nmax + 1):
                keys, nxt, cnt = data[f"keys{n}"], data[f"next{n}"], data[f"count{n}"]
                for key, t, c in zip(map(tuple, keys.tolist()), nxt.tolist(), cnt.tolist(), strict=True):
                    counter = table.counts.get(key)
                    if counter is None:
                        counter = table.counts[key] = Counter()
                    counter[t] = c
        return table


def build_table(token_streams: Iterable[Sequence[int]], ngram_max: int = 4, min_total: int = 2) -> NgramTable:
    """Count n-grams over several token sequences (documents) and prune the rare ones."""
    table = NgramTable(1, ngram_max)
    for tokens in token_streams:
        table.add(tokens)
    table.prune(min_total)
    return table


def another_tokenizer(path: Path) -> str:
    """Why a map cannot draft for the loaded target, and what to do: said as the map's name, never capitalised (a
    tour read "Gemma.npz" for its gemma.npz)."""
    return (
        f"the n-gram map {path.name} was built with another model's tokenizer: rebuild it for this model, or choose "
        "no map"
    )
