"""Live captions: what the loop heard and its translation, as events and display lines (cli.py prints them)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from rich.markup import escape

__all__ = ["CaptionEvent", "Captions"]

KINDS = ("partial", "final", "translation")
_STYLE = {"final": "cyan", "translation": "green"}


@dataclass(frozen=True)
class CaptionEvent:
    kind: str  # partial (the utterance so far, rewritten as it grows) | final (its transcript) | translation
    utterance: int  # the loop's utterance number, from 1
    lang: str  # language of ``text``
    text: str
    at: float = field(default_factory=time.time)  # wall-clock seconds when the loop produced it

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"caption kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def transient(self) -> bool:
        """A partial: shown on one status line that the next caption overwrites, and left out of logs."""
        return self.kind == "partial"

    def markup(self) -> str:
        """One line of rich markup: ``HH:MM:SS #n lang text`` (the text escaped: brackets stay literal)."""
        stamp = time.strftime("%H:%M:%S", time.localtime(self.at))
        if self.transient:
            return f"[dim]{stamp} #{self.utterance} {escape(self.lang)} … {escape(self.text)}[/]"
        style = _STYLE[self.kind]
        return f"{stamp} #{self.utterance} [{style}]{escape(self.lang)}[/] {escape(self.text)}"


class Captions:
    """A loop ``on_caption`` callback that hands each caption to ``show`` as a :class:`CaptionEvent`."""

    def __init__(self, show: Callable[[CaptionEvent], None]):
        self._show = show

    def __call__(self, kind: str, utterance: int, lang: str, text: str) -> None:
        self._show(CaptionEvent(kind, utterance, lang, text))
