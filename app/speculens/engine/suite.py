"""The prompt suite (``resources/prompts/bench.json``, read with :mod:`importlib.resources`): what ``speculens-cli
bench`` and the Pair lab measure, and the examples an empty conversation offers. Light (no llama.cpp, no Qt), so
the window can read it while it is built."""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass

from speculens.errors import InvalidInputError

SUITE_FILE = "prompts/bench.json"


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt of the suite.

    Attributes:
        id: short unique name.
        category: chat, code-generation, code-rewrite, summarisation, long-context, ...
        messages: the conversation, formatted with the target's chat template.
    """

    id: str
    category: str
    messages: tuple[dict[str, str], ...]


def load_suite(text: str | None = None) -> list[BenchPrompt]:
    """The prompt suite: the shipped one, or one given as JSON text.

    Args:
        text: a suite in the same JSON format (``{"prompts": [{"id", "category", "messages"}]}``).

    Returns:
        The prompts, in order.

    Raises:
        ValueError: the JSON is not a suite.
    """
    if text is None:
        text = (importlib.resources.files("speculens.resources") / SUITE_FILE).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
        prompts = [
            BenchPrompt(str(p["id"]), str(p["category"]), tuple(dict(m) for m in p["messages"]))
            for p in data["prompts"]
        ]
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"not a prompt suite: {exc}") from exc
    if len({p.id for p in prompts}) != len(prompts):
        raise InvalidInputError("prompt ids in a suite must be unique")
    return prompts
