"""Stop strings, matched in the engine thread on the detokenised text (as vLLM's detokenizer).

:class:`StopStrings` is a request's ``stop_check``: fed each sampled token, it returns True at
the first token whose text completes one of the stop strings, so the engine ends the request
at that step with ``finish_reason="stop"`` (counted, and timed in the E2E histogram, like any
finished request). ``cut`` is then where the earliest completed stop string starts: the text
returned is ``text[:cut]``. Invariant: a stop string counts only if it ends in the text of the
``min_tokens``-th token or later (vLLM's ``min_tokens``), and the first match wins.

While streaming, the last ``hold = max(len(stop)) − 1`` characters are held back: a stop
string completed by a later token starts at or after ``len(text) − hold`` of the text seen
before that token, so nothing already sent is ever cut.
"""

from __future__ import annotations

from collections.abc import Callable


class StopStrings:
    def __init__(self, stops: list[str], min_tokens: int, decode: Callable[[int], str]) -> None:
        self.stops = [s for s in stops if s]
        self.min_tokens = min_tokens
        self.decode = decode
        self.text = ""
        self.num_tokens = 0
        self.cut = -1

    @property
    def hold(self) -> int:
        return max((len(s) for s in self.stops), default=1) - 1

    def __call__(self, token: int) -> bool:
        before = len(self.text)
        self.text += self.decode(token)
        self.num_tokens += 1
        if self.num_tokens < self.min_tokens or len(self.text) == before:
            return False
        hits = [
            i
            for i in (self.text.find(s, max(0, before - len(s) + 1)) for s in self.stops)
            if i >= 0
        ]
        if not hits:
            return False
        self.cut = min(hits)
        return True
