"""Routing between languages: pure logic."""

from __future__ import annotations

import pytest

from edge_rt.errors import UnsupportedLanguageError
from edge_rt.route import plan_route

PACK = dict(asr_languages={"en", "pt", "fr", "de", "zh"}, mt_pairs={("en", "pt"), ("pt", "en")},
            tts_languages={"en", "pt", "de", "fr", "zh"}, asr_can_translate=True)


@pytest.mark.parametrize("src,tgt,task,pair", [
    ("en", "pt", "transcribe", ("en", "pt")),
    ("pt", "en", "transcribe", ("pt", "en")),
    ("fr", "en", "translate", None),
    ("zh", "pt", "translate", ("en", "pt")),  # pivot through English
    ("en", "en", "transcribe", None),
])
def test_routes(src, tgt, task, pair):
    r = plan_route(src, tgt, **PACK)
    assert (r.asr_task, r.mt_pair) == (task, pair)


def test_unknown_target_names_the_choices():
    with pytest.raises(UnsupportedLanguageError, match="translates into en, pt"):
        plan_route("en", "xx", **PACK)


def test_unknown_source_is_named():
    with pytest.raises(UnsupportedLanguageError, match="'klingon'"):
        plan_route("klingon", "en", **PACK)


def test_english_only_asr_cannot_translate_french():
    pack = dict(PACK, asr_languages={"en"}, asr_can_translate=False)
    with pytest.raises(UnsupportedLanguageError):
        plan_route("fr", "en", **pack)


def test_a_language_the_tts_speaks_but_nothing_translates_into_is_refused():
    with pytest.raises(UnsupportedLanguageError, match="translates into en, pt"):
        plan_route("en", "de", **PACK)
