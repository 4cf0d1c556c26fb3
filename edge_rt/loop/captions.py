"""Live captions in the terminal: the source as it is heard, then its translation."""

from __future__ import annotations

import time

from rich.console import Console


class Captions:
    """A loop ``on_caption`` callback that prints with rich.

    Partials rewrite one status line on a terminal (and are skipped when the
    output is not a terminal, e.g. under systemd); finals and translations are
    printed as lines, so a log keeps them.
    """

    def __init__(self, console: Console | None = None):
        self.console = console or Console()

    def __call__(self, kind: str, utterance: int, lang: str, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        if kind == "partial":
            if self.console.is_terminal:
                self.console.print(f"[dim]{stamp} #{utterance} {lang} … {text}[/]", end="\r", highlight=False,
                                   soft_wrap=True)
            return
        style = "cyan" if kind == "final" else "green"
        self.console.print(f"{stamp} #{utterance} [{style}]{lang}[/] {text}", highlight=False, soft_wrap=True)
