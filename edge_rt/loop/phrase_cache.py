"""Recent phrases: a repeated sentence ("thank you", "where is the station?") is not translated
and synthesized again.

An LRU map keyed on the normalized source text (language, lower case, punctuation and
spacing folded) holds the translation and the first clause's audio. A hit saves the MT call and
the first TTS clause; what that work cost when it was done is counted as saved time.
"""

from __future__ import annotations

import collections
import re
import unicodedata
from dataclasses import dataclass

from edge_rt.stages.tts.voice import TtsAudio

__all__ = ["CacheStats", "PhraseCache", "normalize"]

_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Case, punctuation and spacing folded: "Thank you!" and "thank you." are one phrase."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", _PUNCT.sub(" ", text)).strip()


@dataclass
class CacheStats:
    lookups: int = 0  # translations looked up
    hits: int = 0  # translations found
    audio_hits: int = 0  # first clauses found (same translation, same speaking rate)
    saved_ms: float = 0.0  # MT and first-clause synthesis time the hits did not spend

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0

    def as_dict(self) -> dict:
        return dict(lookups=self.lookups, hits=self.hits, audio_hits=self.audio_hits,
                    hit_rate=round(self.hit_rate, 3), saved_ms=round(self.saved_ms, 1))


@dataclass
class _Entry:
    translation: str
    mt_ms: float
    first: TtsAudio | None = None  # the first clause of the translation, synthesized at ``rate``
    rate: float = 1.0
    tts_ms: float = 0.0


class PhraseCache:
    """``capacity`` most recently used phrases; bounded, so an always-on service does not grow."""

    def __init__(self, capacity: int = 64):
        if capacity < 1:
            raise ValueError(f"a phrase cache holds at least 1 phrase, got capacity={capacity}")
        self.capacity = capacity
        self.stats = CacheStats()
        self._entries: collections.OrderedDict[tuple, _Entry] = collections.OrderedDict()

    @staticmethod
    def key(lang: str, text: str, target: str) -> tuple[str, str, str] | None:
        phrase = normalize(text)
        return (lang, phrase, target) if phrase else None

    def translation(self, key: tuple | None) -> str | None:
        """The cached translation of ``key``'s phrase, or None (counted as a lookup)."""
        if key is None:
            return None
        self.stats.lookups += 1
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        self.stats.saved_ms += entry.mt_ms
        return entry.translation

    def put_translation(self, key: tuple | None, translation: str, mt_ms: float) -> None:
        if key is None:
            return
        old = self._entries.get(key)
        if old is not None and old.translation == translation:
            self._entries.move_to_end(key)
            return
        self._entries[key] = _Entry(translation, mt_ms)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def first_clause(self, key: tuple | None, translation: str, rate: float) -> TtsAudio | None:
        """The first clause's audio if it was synthesized for this very translation at this rate."""
        entry = self._entries.get(key) if key is not None else None
        if entry is None or entry.first is None or entry.translation != translation or entry.rate != rate:
            return None
        self.stats.audio_hits += 1
        self.stats.saved_ms += entry.tts_ms
        return entry.first

    def put_first_clause(self, key: tuple | None, translation: str, audio: TtsAudio, rate: float,
                         tts_ms: float) -> None:
        entry = self._entries.get(key) if key is not None else None
        if entry is not None and entry.translation == translation:
            entry.first, entry.rate, entry.tts_ms = audio, rate, tts_ms

    def __len__(self) -> int:
        return len(self._entries)
