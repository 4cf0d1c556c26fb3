"""Phoneme ids: the scheme, and equality with piper-tts 1.8 on real sentences."""

from __future__ import annotations

import json

import pytest

from edge_rt.stages.tts.espeak import Espeak
from edge_rt.stages.tts.piper_ids import PiperVoiceConfig, phonemes_to_ids, split_phonemes

ID_MAP = {"_": (0,), "^": (1,), "$": (2,), "a": (14,), "b": (15,), "aɪ": (161,), ".": (10,)}

# Numbers, money, times, dates, abbreviations, quotes, questions, exclamations,
# clause punctuation, ellipses, accents, blank lines.
SENTENCES = [
    "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
    "The meeting starts at 10:45 on March 3rd, 2024.",
    "Dr. Watson paid $12.50 for 3 coffees.",
    "Can you believe it's already 2025?!",
    'She said, "I\'ll be there by noon."',
    "Wait... really? Yes; absolutely: no doubt.",
    "Temperatures reached 41.7°C (107°F) yesterday.",
    "I read 1,234,567 pages — twice!",
    "What's the 3rd item on the list?",
    "It's 50% off: buy now!",
    "The café served crème brûlée.",
    "Version 2.0.1 was released on 1/2/2023.",
    "Mr. and Mrs. Jones live on 5th Ave.\n\nThey moved in 1999.",
    "HE HOPED THERE WOULD BE STEW FOR DINNER TURNIPS AND CARROTS AND BRUISED POTATOES",
]


def test_id_scheme():
    assert phonemes_to_ids(["a", "b", "."], ID_MAP) == [1, 0, 14, 0, 15, 0, 10, 0, 2]


def test_unknown_phonemes_are_skipped():
    assert phonemes_to_ids(["a", "Ω", "b"], ID_MAP) == [1, 0, 14, 0, 15, 0, 2]


def test_vowel_clusters_merge():
    assert split_phonemes("baɪa", frozenset({("a", "ɪ")})) == ["b", "aɪ", "a"]
    assert split_phonemes("baɪa") == ["b", "a", "ɪ", "a"]


def test_config_from_dict(default_pack):
    raw = json.loads(default_pack.asset("tts", "en_config").read_text())
    config = PiperVoiceConfig.from_dict(raw)
    assert (config.sample_rate, config.espeak_voice) == (22050, "en-us")
    assert (config.noise_scale, config.length_scale, config.noise_w) == (0.667, 1.0, 0.8)
    assert config.phoneme_id_map["^"] == (1,)
    with pytest.raises(ValueError, match="phoneme_type 'pinyin'"):
        PiperVoiceConfig.from_dict({**raw, "phoneme_type": "pinyin"})
    with pytest.raises(ValueError, match="not a Piper"):
        PiperVoiceConfig.from_dict({k: v for k, v in raw.items() if k != "phoneme_id_map"})


@pytest.fixture(scope="module")
def reference(default_pack):
    from piper import PiperVoice

    return PiperVoice.load(default_pack.model("tts", "en"), default_pack.asset("tts", "en_config"))


@pytest.fixture(scope="module")
def ours(default_pack):
    espeak = Espeak(default_pack.asset("tts", "espeak_lib"), default_pack.asset("tts", "espeak_data"))
    config = PiperVoiceConfig.from_dict(json.loads(default_pack.asset("tts", "en_config").read_text()))

    def ids(text: str) -> list[list[int]]:
        return [phonemes_to_ids(split_phonemes(s, config.vowel_clusters), config.phoneme_id_map)
                for s in espeak.phonemize(text, config.espeak_voice)]

    return ids


@pytest.mark.parametrize("text", SENTENCES)
def test_ids_equal_piper_tts(ours, reference, text):
    expected = [reference.phonemes_to_ids(p) for p in reference.phonemize(text) if p]
    assert ours(text) == expected


def test_known_divergence_is_only_the_newer_j_glide(ours, reference):
    """piper-tts bundles a newer espeak-ng than espeakng-loader's 1.52.0, which writes a
    j-glide (ʲ) after /i/ before a vowel. That is the only difference we have seen
    (5 of 72 test texts); sentence splitting and punctuation agree everywhere."""
    text = "It costs $1,000 at 3:30 p.m. today."
    glide = reference.config.phoneme_id_map["ʲ"][0]
    pad = reference.config.phoneme_id_map["_"][0]
    expected = [reference.phonemes_to_ids(p) for p in reference.phonemize(text) if p]
    got = ours(text)
    assert got != expected, "the bundled espeak-ng changed: this divergence is gone, drop the test"
    stripped = [[i for j, i in enumerate(s) if not (i == glide or (i == pad and j and s[j - 1] == glide))]
                for s in expected]
    assert got == stripped
