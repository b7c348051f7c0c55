"""Text assembled from per-token bytes.

A character can span several tokens (byte-fallback vocabularies split CJK and emoji into single bytes), so
tokens are never decoded one by one: their bytes go through an incremental UTF-8 decoder that holds back an
unfinished character until its last byte arrives.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextAssembler:
    """Turns a stream of token bytes into text, and holds back a possible stop string.

    Args:
        stop: strings that end generation; text up to (not including) the first one is produced.
    """

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self.text = ""  # all decoded text so far
        self._released = 0  # how much of self.text has been handed out
        self.stopped = False

    def feed(self, data: bytes) -> str:
        """Add one token's bytes.

        Returns:
            The new text that is safe to show: complete characters that cannot be part of a stop string.
        """
        if self.stopped:
            return ""
        self.text += self._decoder.decode(data)
        return self._release(final=False)

    def flush(self) -> str:
        """Release everything still held back (end of generation)."""
        if not self.stopped:
            self.text += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, *, final: bool) -> str:
        if self._stop and not self.stopped:
            start = max(0, self._released - self._hold)
            hits = [i for i in (self.text.find(s, start) for s in self._stop) if i >= 0]
            if hits:
                self.text = self.text[: min(hits)]
                self.stopped = True
                final = True
        end = len(self.text)
        if not final and self._stop:
            # Hold back a tail that could still grow into a stop string.
            for keep in range(min(self._hold, end - self._released), 0, -1):
                tail = self.text[end - keep :]
                if any(s.startswith(tail) for s in self._stop):
                    end -= keep
                    break
        out = self.text[self._released : end]
        self._released = end
        return out
