"""espeak-ng through ctypes: clause splitting as piper's bridge does it, phonemes, formant speech."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from edge_rt.errors import UnsupportedLanguageError
from edge_rt.stages.tts.espeak import Espeak

# Texts that exercise every way espeak-ng ends a clause.
TRICKY = [
    "Hello world.   How are you?\nFine!",
    'He said "hi." Then left.',
    "(Really?) Yes.",
    "What?! No!!",
    "e.g. this, i.e. that.",
    "Well — maybe; maybe not: who knows...",
    "Mr. and Mrs. Jones live on 5th Ave.",
    "One\n\nTwo",
    "“Smart quotes,” she said.",
    "Ends with comma,",
    "Numbers: 1, 2, 3.",
    "no punctuation here",
    "Hi. X",
    "Why?\n\nBecause.",
    "Wait.. and Wait.... and End.)",
    "Hi!!!",
    ". ? ...",
    'Wow!"',
    "你好，世界。今天天气很好。",
]


@pytest.fixture(scope="module")
def espeak(default_pack):
    return Espeak(default_pack.asset("tts", "espeak_lib"), default_pack.asset("tts", "espeak_data"))


@pytest.fixture(scope="module")
def bridge():
    """piper-tts's own C bridge to espeak-ng (its bundled library and data): the reference."""
    from piper import espeakbridge
    from piper.phonemize_espeak import ESPEAK_DATA_DIR

    espeakbridge.initialize(str(ESPEAK_DATA_DIR))
    return espeakbridge


@pytest.mark.parametrize("text", TRICKY)
def test_clause_terminators_match_piper_bridge(espeak, bridge, text):
    ours = espeak.clauses(text, "en-us")
    bridge.set_voice("en-us")
    ref = bridge.get_phonemes(text)
    assert [(c.terminator, c.end_of_sentence) for c in ours] == [(t, end) for _, t, end in ref]
    assert [c.phonemes for c in ours] == [p for p, _, _ in ref]


@pytest.mark.parametrize("text", TRICKY)
def test_clause_texts_cover_the_input(espeak, text):
    assert "".join(c.text for c in espeak.clauses(text, "en-us")) == text


def test_sentences_keep_punctuation_as_piper_does(espeak):
    assert espeak.phonemize("Hello world. How are you, friend?", "en-us") == [
        "həlˈoʊ wˈɜːld.",
        "hˈaʊ ɑːɹ juː, fɹˈɛnd?",
    ]


def test_sentence_texts(espeak):
    sentences = espeak.sentences("Hello there, world. Bye!", "en-us")
    assert [s.text for s in sentences] == ["Hello there, world. ", "Bye!"]


@pytest.mark.parametrize(
    "voice, text, expect",
    [
        ("pt", "Olá, mundo. Como vai você?", ["ɔlˈa, mˈũŋdʊ.", "kˈomʊ vaɪ vosˈe?"]),
        ("de", "Guten Tag, wie geht's?", ["ɡˈuːtən tˈɑːk, viː ɡˈeːts?"]),
        ("cmn", "你好，世界。", None),
    ],
)
def test_phonemize_other_languages(espeak, voice, text, expect):
    import unicodedata

    got = espeak.phonemize(text, voice)
    if expect is not None:
        assert got == [unicodedata.normalize("NFD", s) for s in expect]
    else:  # Mandarin: tone numbers after each syllable
        assert len(got) == 1 and any(ch.isdigit() for ch in got[0]) and "χ" in got[0]


def test_unknown_voice_raises_instead_of_crashing(espeak):
    # espeak-ng segfaults when asked to phonemize after a failed voice change
    with pytest.raises(UnsupportedLanguageError, match="no voice 'zz-nope'"):
        espeak.phonemize("hello", "zz-nope")
    assert espeak.phonemize("hello", "en-us") == ["həlˈoʊ"]


def test_empty_text(espeak):
    assert espeak.phonemize("", "en-us") == []
    assert espeak.phonemize("  \n ", "en-us") == []
    audio, rate = espeak.synthesize("", "pt")
    assert audio.shape == (0,) and rate == espeak.sample_rate


def test_formant_portuguese(espeak):
    audio, rate = espeak.synthesize("Bom dia. Eu gostaria de um café, por favor.", "pt")
    assert rate == 22050
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert 1.5 < len(audio) / rate < 6.0
    rms = float(np.sqrt(np.mean(audio**2)))
    assert 0.02 < rms < 0.5
    assert np.abs(audio).max() <= 1.0


def test_voices_list_names_the_languages(espeak):
    by_file = {v.file_name.lower(): v for v in espeak.voices()}
    assert {"pt", "de", "cmn", "en-us"} <= set(by_file)
    assert ("zh", 5) in by_file["cmn"].languages


def test_concurrent_calls_are_serialised(espeak):
    expected = {"en-us": espeak.phonemize("Good morning.", "en-us"), "pt": espeak.phonemize("Bom dia.", "pt")}
    results: list[bool] = []

    def work(voice, text):
        for _ in range(20):
            results.append(espeak.phonemize(text, voice) == expected[voice])

    threads = [threading.Thread(target=work, args=a) for a in (("en-us", "Good morning."), ("pt", "Bom dia."))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 40 and all(results)


def test_data_path_must_fit_espeak_buffer(default_pack, tmp_path):
    deep = tmp_path / ("d" * 200)
    deep.mkdir()
    (deep / "phontab").write_bytes(b"")
    with pytest.raises(ValueError, match="shorter path"):
        Espeak(default_pack.asset("tts", "espeak_lib"), deep)
