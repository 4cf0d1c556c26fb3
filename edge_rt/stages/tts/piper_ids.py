"""A Piper voice's config and its phoneme -> id scheme (as piper-tts 1.8 does it).

A sentence's IPA string is split into code points (Piper's "phonemes"), known
vowel clusters are merged, and the ids are ``^ _ p1 _ p2 _ ... pn _ $``: the
start mark, then every phoneme followed by the pad, then the end mark.
Phonemes missing from the map are skipped, as piper does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["BOS", "EOS", "PAD", "PiperVoiceConfig", "phonemes_to_ids", "split_phonemes"]

PAD = "_"  # id 0 in every Piper voice: follows each phoneme
BOS = "^"  # start of sentence
EOS = "$"  # end of sentence

# piper.config defaults, used when a voice config omits them
DEFAULT_NOISE_SCALE = 0.667
DEFAULT_LENGTH_SCALE = 1.0
DEFAULT_NOISE_W = 0.8
DEFAULT_HOP_LENGTH = 256  # output samples per decoder frame

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class PiperVoiceConfig:
    """The parts of a Piper ``.onnx.json`` the runtime uses."""

    sample_rate: int  # Hz of the waveform the model produces
    espeak_voice: str  # espeak-ng voice that phonemizes for this model, e.g. "en-us"
    phoneme_id_map: Mapping[str, tuple[int, ...]]
    num_speakers: int = 1
    noise_scale: float = DEFAULT_NOISE_SCALE  # generator noise
    length_scale: float = DEFAULT_LENGTH_SCALE  # > 1 speaks slower
    noise_w: float = DEFAULT_NOISE_W  # phoneme-duration noise
    hop_length: int = DEFAULT_HOP_LENGTH
    vowel_clusters: frozenset[tuple[str, ...]] = frozenset()  # code-point runs merged into one phoneme

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> "PiperVoiceConfig":
        """Parse a voice config (the JSON next to the model); raises ValueError naming what is wrong."""
        phoneme_type = config.get("phoneme_type", "espeak")
        if phoneme_type != "espeak":
            raise ValueError(
                f"Piper voice uses phoneme_type {phoneme_type!r}; edge_rt phonemizes with espeak-ng only, "
                f"so pick a voice whose config says \"phoneme_type\": \"espeak\""
            )
        try:
            sample_rate = int(config["audio"]["sample_rate"])
            espeak_voice = str(config["espeak"]["voice"])
            id_map = {str(k): tuple(int(i) for i in v) for k, v in config["phoneme_id_map"].items()}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"Piper voice config lacks or mangles {e}: not a Piper .onnx.json") from e
        missing = [m for m in (PAD, BOS, EOS) if m not in id_map]
        if missing:
            raise ValueError(f"Piper voice config's phoneme_id_map lacks {missing}: not a Piper .onnx.json")
        inference = config.get("inference", {})
        clusters = config.get("vowel_clusters") or []
        return cls(
            sample_rate=sample_rate,
            espeak_voice=espeak_voice,
            phoneme_id_map=id_map,
            num_speakers=int(config.get("num_speakers", 1)),
            noise_scale=float(inference.get("noise_scale", DEFAULT_NOISE_SCALE)),
            length_scale=float(inference.get("length_scale", DEFAULT_LENGTH_SCALE)),
            noise_w=float(inference.get("noise_w", DEFAULT_NOISE_W)),
            hop_length=int(config.get("hop_length", DEFAULT_HOP_LENGTH)),
            vowel_clusters=frozenset(tuple(c) for c in clusters),
        )


def split_phonemes(sentence: str, vowel_clusters: frozenset[tuple[str, ...]] = frozenset()) -> list[str]:
    """A sentence's IPA string (NFD) as Piper phonemes: code points, with known vowel clusters merged."""
    phones = list(sentence)
    if not vowel_clusters:
        return phones
    longest = max(len(c) for c in vowel_clusters)
    out: list[str] = []
    i = 0
    while i < len(phones):
        for n in range(min(longest, len(phones) - i), 1, -1):
            if tuple(phones[i : i + n]) in vowel_clusters:
                out.append("".join(phones[i : i + n]))
                i += n
                break
        else:
            out.append(phones[i])
            i += 1
    return out


def phonemes_to_ids(phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]]) -> list[int]:
    """``^ _ (phoneme _)* $`` as ids; phonemes absent from ``id_map`` are skipped (as piper does)."""
    pad = id_map[PAD]
    ids = [*id_map[BOS], *pad]
    for phoneme in phonemes:
        mapped = id_map.get(phoneme)
        if mapped is None:
            _LOGGER.debug("phoneme %r is not in the voice's id map; skipped", phoneme)
            continue
        ids.extend(mapped)
        ids.extend(pad)
    ids.extend(id_map[EOS])
    return ids
