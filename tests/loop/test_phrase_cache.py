import numpy as np
import pytest

from edge_rt.loop.phrase_cache import PhraseCache, normalize
from edge_rt.stages.tts.voice import TtsAudio


def test_normalize_folds_case_punctuation_and_space():
    assert normalize("Thank you!") == normalize("  thank   YOU. ") == "thank you"
    assert normalize("...") == ""
    assert normalize("Où est la gare ?") == "où est la gare"


def test_translation_hit_counts_saved_time():
    c = PhraseCache(4)
    k = c.key("en", "Thank you!", "pt")
    assert c.translation(k) is None
    c.put_translation(k, "Obrigado!", mt_ms=30.0)
    assert c.translation(c.key("en", "thank you", "pt")) == "Obrigado!"
    assert c.translation(c.key("en", "thank you", "en")) is None  # another target
    assert c.translation(c.key("pt", "thank you", "pt")) is None  # another source language
    assert c.stats.lookups == 4 and c.stats.hits == 1 and c.stats.saved_ms == 30.0
    assert c.stats.as_dict()["hit_rate"] == 0.25


def test_first_clause_only_for_the_same_translation_and_rate():
    c = PhraseCache(4)
    k = c.key("en", "Where is the station?", "pt")
    c.put_translation(k, "Onde fica a estação?", 20.0)
    audio = TtsAudio(np.zeros(100, np.float32), 22050, "espeak", "Onde fica a estação?")
    c.put_first_clause(k, "Onde fica a estação?", audio, 1.0, tts_ms=50.0)
    assert c.first_clause(k, "Onde fica a estação?", 1.25) is None
    assert c.first_clause(k, "Onde é a estação?", 1.0) is None
    assert c.first_clause(k, "Onde fica a estação?", 1.0) is audio
    assert c.stats.audio_hits == 1 and c.stats.saved_ms == 50.0


def test_least_recently_used_goes_first_and_size_is_bounded():
    c = PhraseCache(2)
    a, b, d = (c.key("en", t, "pt") for t in ("one", "two", "three"))
    c.put_translation(a, "um", 1)
    c.put_translation(b, "dois", 1)
    assert c.translation(a) == "um"  # a is now the most recent
    c.put_translation(d, "três", 1)
    assert len(c) == 2
    assert c.translation(b) is None and c.translation(a) == "um" and c.translation(d) == "três"


def test_empty_phrase_is_never_cached():
    c = PhraseCache(2)
    assert c.key("en", " . ", "pt") is None
    c.put_translation(None, "x", 1)
    assert len(c) == 0 and c.translation(None) is None and c.stats.lookups == 0
    with pytest.raises(ValueError):
        PhraseCache(0)
