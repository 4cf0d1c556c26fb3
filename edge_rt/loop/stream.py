"""Stable prefix of streaming hypotheses by local agreement.

A partial hypothesis is re-decoded on the growing utterance every few hundred
milliseconds; words on which two consecutive partials agree (their common
prefix) are considered stable and never retracted. Pure string logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def words(text: str) -> list[str]:
    return text.split()


def _key(word: str) -> str:
    """Compare words without case or trailing punctuation (partials often lack the final period)."""
    return word.strip(".,!?;:\"'¿¡…").lower()


def common_prefix(a: list[str], b: list[str]) -> int:
    """Number of leading words on which ``a`` and ``b`` agree."""
    n = 0
    for x, y in zip(a, b):
        if _key(x) != _key(y):
            break
        n += 1
    return n


@dataclass
class LocalAgreement:
    """Tracks partial hypotheses of one utterance and its committed (stable) words."""

    committed: list[str] = field(default_factory=list)
    _previous: list[str] = field(default_factory=list)

    def update(self, partial: str) -> list[str]:
        """Feed a new partial; returns the words newly committed by it."""
        cur = words(partial)
        agreed = common_prefix(self._previous, cur)
        # Stable words only grow; a partial that disagrees with committed words
        # cannot retract them (the final hypothesis decides).
        new = []
        if agreed > len(self.committed) and common_prefix(self.committed, cur) == len(self.committed):
            new = cur[len(self.committed) : agreed]
            self.committed.extend(new)
        self._previous = cur
        return new

    @property
    def stable_text(self) -> str:
        return " ".join(self.committed)

    def reset(self) -> None:
        self.committed.clear()
        self._previous = []
