"""Writing a generation's step events as JSON or CSV.

Qt-free; the HTML and PNG exports live with the views they draw.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from speculens.engine.events import Event

CSV_COLUMNS = (
    "step",
    "n_draft_max",
    "offered",
    "source",  # which source drafted the step (lookup, ngram-cache, draft, ...; empty: none), as in the JSON
    "probe",
    "drafted",
    "accepted",
    "emitted",
    "drafted_text",
    "emitted_text",
    "origins",
    "draft_ms",
    "verify_ms",
    "overhead_ms",
    "n_generated",
    "tokens_per_second",
    "acceptance",
)


def write_events_json(events: Sequence[Event], path: Path, context: dict[str, object] | None = None) -> None:
    """Every event (start, steps, finish) as a JSON list of dicts (:func:`event_to_dict`); ``context`` (which
    models answered, when it was exported) is added to the start event's."""
    from speculens.engine.events import event_to_dict

    items = [event_to_dict(e) for e in events]
    if context and items and items[0].get("type") == "start":
        items[0] = {**items[0], **context}
    path.write_text(json.dumps(items, indent=1, ensure_ascii=False), encoding="utf-8")


def write_events_csv(events: Sequence[Event], path: Path) -> int:
    """One row per speculation step; returns the number of rows."""
    from speculens.engine.events import StepEvent

    rows = 0
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for e in events:
            if not isinstance(e, StepEvent):
                continue
            writer.writerow(
                [
                    e.step,
                    e.n_draft_max,
                    "" if e.offered is None else e.offered,
                    e.source or "",
                    int(e.probe),
                    len(e.drafted),
                    e.n_accepted,
                    len(e.emitted),
                    "|".join(d.piece.decode("utf-8", errors="replace") for d in e.drafted),
                    "|".join(t.piece.decode("utf-8", errors="replace") for t in e.emitted),
                    "|".join(t.origin.value for t in e.emitted),
                    f"{e.draft_ms:.3f}",
                    f"{e.verify_ms:.3f}",
                    f"{e.overhead_ms:.3f}",
                    e.stats.n_generated,
                    # No figure where there is none yet (a tour charted "0% acceptance" from steps that drafted
                    # nothing, and 0 tokens/s at the first token, which comes with the prompt): empty, not 0.
                    f"{e.stats.tokens_per_second:.3f}" if e.stats.n_generated > 1 else "",
                    f"{e.stats.acceptance:.4f}" if e.stats.n_drafted else "",
                ]
            )
            rows += 1
    return rows
