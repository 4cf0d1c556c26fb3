"""Live captions are events and display lines; printing them is the CLI's job."""

from __future__ import annotations

import pytest
from rich.console import Console

from edge_rt.loop.captions import CaptionEvent, Captions


def test_captions_hand_each_loop_caption_over_as_an_event():
    seen: list[CaptionEvent] = []
    captions = Captions(seen.append)
    captions("partial", 3, "en", "ask not")
    captions("final", 3, "en", "Ask not what your country can do for you.")
    captions("translation", 3, "pt", "Não pergunte o que o seu país pode fazer por você.")
    assert [(e.kind, e.utterance, e.lang) for e in seen] == [("partial", 3, "en"), ("final", 3, "en"),
                                                             ("translation", 3, "pt")]
    assert [e.transient for e in seen] == [True, False, False]


def test_a_caption_line_keeps_brackets_in_the_text_literal():
    event = CaptionEvent("final", 7, "en", "press [bold]enter[/bold] now", at=0.0)
    console = Console(record=True, width=200, color_system=None)
    console.print(event.markup(), highlight=False)
    line = console.export_text().strip()
    assert line.endswith("#7 en press [bold]enter[/bold] now"), line


def test_an_unknown_caption_kind_is_refused():
    with pytest.raises(ValueError, match="partial, final, translation"):
        CaptionEvent("subtitle", 1, "en", "x")
