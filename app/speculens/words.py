"""Small helpers for the sentences the app and the CLI show."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime


def upper_first(text: str) -> str:
    """``text`` with its first letter in upper case and the rest as it is ("GPU" stays "GPU")."""
    return text[:1].upper() + text[1:]


def and_list(items: Sequence[str]) -> str:
    """Items as a sentence lists them: "a", "a and b", "a, b and c"."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def duration(seconds: float) -> str:
    """A rough time span: "40 s" under a minute and a half, else whole minutes ("about 0 min left" read as done)."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def percent(part: int, whole: int) -> str:
    """``part`` of ``whole`` in per cent, whole numbers except where rounding would say all or none of a share that is
    neither: 208 of 209 is "99.5%", not "100%" over a rejected draft (a tour's). Of nothing: "–"."""
    if whole <= 0:
        return "–"
    share = 100 * part / whole
    if part < whole and f"{share:.0f}" == "100":
        return f"{share:.1f}%" if share < 99.95 else ">99.9%"
    if part > 0 and f"{share:.0f}" == "0":
        return f"{share:.1f}%" if share >= 0.05 else "<0.1%"
    return f"{share:.0f}%"


def local_time(iso: str) -> str:
    """An ISO 8601 time (the Pair lab saves its runs' in UTC) as this computer's local "YYYY-MM-DD HH:MM", as the
    conversation list shows times: a tour read the lab's UTC times as local ones, hours off. A time without an
    offset is taken as UTC; one that cannot be read is shown as written."""
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return iso.replace("T", " ")[:16]
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).astimezone().strftime("%Y-%m-%d %H:%M")
