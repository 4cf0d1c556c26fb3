"""espeak-ng through ctypes: IPA phonemes for Piper, and a formant voice for every other language.

The library and its data come from the built pack (``assets/tts/espeak/``); this
module never imports ``espeakng_loader`` or ``piper``.

Phonemization mirrors piper-tts 1.8 (``piper/espeakbridge.c`` +
``piper/phonemize_espeak.py``): one ``espeak_TextToPhonemes`` call per clause
with IPA output, ``(lang)`` switch flags removed, the clause's punctuation kept
(plus a space after ``, : ;``), clauses joined into sentences and NFD-normalised.
Piper's bridge reads each clause's terminator from
``espeak_TextToPhonemesWithTerminator``, which libespeak-ng 1.52.0 does not
export; we recover it from the text that espeak consumed for the clause (see
:func:`_terminator`), which gives the same result on everything tested.

espeak-ng keeps process-global state (one voice, one synth callback, one data
path), so every call holds one module lock; the library is initialised once per
process and data path, and the voice is set on every call.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_rt.errors import PackNotBuiltError, UnsupportedLanguageError

__all__ = ["Espeak", "EspeakClause", "EspeakSentence", "EspeakVoice"]

# speak_lib.h
AUDIO_OUTPUT_SYNCHRONOUS = 0x02  # synth runs in the calling thread and hands audio to the callback
espeakCHARS_AUTO = 0  # UTF-8, falling back to 8-bit if invalid (what piper passes)
espeakPHONEMES_IPA = 0x02
espeakINITIALIZE_DONT_EXIT = 0x8000  # without it a missing data file calls exit(1)
espeakENDPAUSE = 0x1000  # a short pause at the end of the text, as the espeak-ng CLI does
POS_CHARACTER = 1
espeakRATE = 1
EE_OK = 0
N_PATH_HOME = 160  # bytes: espeak-ng copies the data path into a buffer of this size (speech.h)
PCM_FULL_SCALE = 32768.0  # int16 samples -> float in [-1, 1)

# Terminators piper's bridge reports, per clause-ending character: (punctuation
# piper keeps, whether the clause ends a sentence). Recorded by running piper
# 1.8's espeakbridge on "alpha<c> Beta" for every Unicode punctuation character
# and keeping those that end a clause. A character whose espeak clause type
# carries CLAUSE_OPTIONAL_SPACE_AFTER (CJK full-width marks, the ellipsis,
# inverted marks) matches none of piper's six types and keeps no punctuation.
_TERMINATORS: dict[str, tuple[str, bool]] = {
    "!": ("!", True), ",": (",", False), ".": (".", True), ":": (":", False), ";": (";", False),
    "?": ("?", True), "¡": ("", False), "¿": ("", False), "\u037e": ("?", True),
    "՝": (",", False), "։": ("", True), "،": (",", False), "؛": (";", False), "؟": ("?", True),
    "۔": (".", True), "܀": ("", True), "܁": (".", True), "܂": (",", False), "܃": ("!", True),
    "܄": (".", True), "܆": (":", False), "܇": (":", False), "܈": (";", False), "܉": ("?", True),
    "߸": (",", False), "߹": ("!", True), "।": ("", True), "॥": ("", True), "෴": ("", True),
    "།": ("", True), "༎": ("", True), "༔": (",", False), "჻": ("", True), "።": (".", True),
    "፣": (",", False), "፤": (";", False), "፥": (":", False), "፦": (":", False), "፧": ("?", True),
    "፨": ("", True), "᙮": (".", True), "᠁": ("", False), "᠂": (",", False), "᠃": (".", True),
    "᠄": (":", False), "᠈": (",", False), "᠉": (".", True), "᥄": ("!", True), "᥅": ("?", True),
    "–": (";", False), "—": (";", False), "…": ("", False), "‼": ("!", True), "⁇": ("?", True),
    "⁏": (";", False), "⳹": (".", True), "⳺": ("?", True), "⳻": ("?", True), "⳾": (".", True),
    "⸲": (",", False), "⸳": (".", True), "⸴": (",", False), "⸵": (";", False), "⸺": (";", False),
    "⸻": (";", False), "⸼": (".", True), "⹁": (",", False), "、": ("", False), "。": ("", True),
    "꓾": (",", False), "꓿": (".", True), "꘍": (",", False), "꘎": (".", True), "꘏": ("?", True),
    "꛳": (".", True), "꛴": (":", False), "꛵": (",", False), "꛶": (";", False), "꛷": ("?", True),
    "︐": (",", False), "︑": (",", False), "︒": (".", True), "︓": (":", False), "︔": (";", False),
    "︕": ("!", True), "︖": ("?", True), "︙": ("", False), "︱": (";", False), "︲": (";", False),
    "﹐": (",", False), "﹑": (",", False), "﹒": (".", True), "﹔": (";", False), "﹕": (":", False),
    "﹖": ("?", True), "﹗": ("!", True), "！": ("", True), "，": ("", False), "．": ("", True),
    "：": ("", False), "；": ("", False), "？": ("", True), "｡": (".", True), "､": (",", False),
}
_ELLIPSIS = ("", False)  # three or more dots: espeak reads them as U+2026
_PARAGRAPH = ("", True)  # two or more newlines end a sentence with a longer pause
_QUESTION_OR_EXCLAMATION = {c for c, (p, _) in _TERMINATORS.items() if p in "?!" and p}
_LANG_SWITCH = re.compile(r"\([^)]+\)")  # "(fr)" ... "(en)" around foreign words, dropped as piper does
_NON_CLAUSE_PUNCT = {",": " ", ":": " ", ";": " "}  # piper adds a space after a non-final terminator


@dataclass(frozen=True)
class EspeakClause:
    """One clause as espeak-ng split it."""

    phonemes: str  # IPA, without the terminator
    terminator: str  # ".", "?", "!", ",", ":", ";" or "" (as piper's bridge reports it)
    end_of_sentence: bool
    text: str  # the input text of this clause (the spans of all clauses concatenate to the input)


@dataclass(frozen=True)
class EspeakSentence:
    """One sentence: Piper's unit of synthesis."""

    phonemes: str  # IPA with punctuation, NFD-normalised (one Piper "phoneme" per code point)
    text: str  # the input text it came from


@dataclass(frozen=True)
class EspeakVoice:
    """One voice espeak-ng lists."""

    name: str
    identifier: str  # e.g. "roa/pt": the file under espeak-ng-data/voices or lang
    languages: tuple[tuple[str, int], ...]  # (language code, priority); lower priority = better match

    @property
    def file_name(self) -> str:
        """The name :meth:`Espeak.phonemize` and :meth:`Espeak.synthesize` accept (e.g. "pt", "cmn")."""
        return self.identifier.rsplit("/", 1)[-1]


class _EspeakVoiceStruct(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_void_p),  # (priority byte, NUL-terminated code)*, then a zero byte
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


_SYNTH_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

# espeak-ng's state is per process (per loaded library); so is this record of it.
_LOCK = threading.Lock()
_INITIALISED: dict[int, tuple[str, int]] = {}  # dlopen handle -> (data path, sample rate)


def _load_library(lib_path: Path) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(str(lib_path))
    except OSError as e:
        raise PackNotBuiltError(
            f"could not load libespeak-ng from {lib_path} ({e}); the pack is incomplete or built for another "
            f"platform (on aarch64 the pack needs the aarch64 espeakng-loader wheel): rebuild it"
        ) from e
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_Terminate.argtypes = []
    lib.espeak_Terminate.restype = ctypes.c_int
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
    lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
    lib.espeak_SetSynthCallback.argtypes = [_SYNTH_CALLBACK]
    lib.espeak_SetSynthCallback.restype = None
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_SetParameter.restype = ctypes.c_int
    lib.espeak_Synth.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
        ctypes.c_void_p, ctypes.c_void_p,
    ]
    lib.espeak_Synth.restype = ctypes.c_int
    lib.espeak_ListVoices.argtypes = [ctypes.c_void_p]
    lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_EspeakVoiceStruct))
    return lib


class Espeak:
    """libespeak-ng loaded from a pack.

    Args:
        lib_path: ``libespeak-ng.so.1.52.0``.
        data_path: the ``espeak-ng-data`` directory (holds ``phontab``, ``*_dict``, ``lang/``).
        rate_wpm: speaking rate of the formant voice, words per minute (espeak's default 175).
    """

    def __init__(self, lib_path: str | Path, data_path: str | Path, rate_wpm: int = 175):
        self.lib_path = Path(lib_path)
        self.data_path = Path(data_path)
        if not (self.data_path / "phontab").is_file():
            raise PackNotBuiltError(
                f"{self.data_path} is not an espeak-ng-data directory (no phontab); rebuild the pack"
            )
        if len(os.fsencode(self.data_path)) >= N_PATH_HOME:
            raise ValueError(
                f"espeak-ng cannot use a data path of {len(os.fsencode(self.data_path))} bytes "
                f"(limit {N_PATH_HOME - 1}): {self.data_path}; move the packs to a shorter path "
                f"(EDGE_RT_ENGINES) or link them from one"
            )
        if not 80 <= rate_wpm <= 450:
            raise ValueError(f"rate_wpm must be within espeak-ng's 80..450 words per minute, got {rate_wpm}")
        self.rate_wpm = rate_wpm
        self._lib = _load_library(self.lib_path)
        self._samples: list[np.ndarray] = []
        self._callback = _SYNTH_CALLBACK(self._on_audio)  # kept alive as long as self
        with _LOCK:
            self.sample_rate = self._ensure_initialised()

    # -- process-global state (call with _LOCK held) ----------------------------------------------

    def _ensure_initialised(self) -> int:
        key = self._lib._handle
        data = str(self.data_path)
        state = _INITIALISED.get(key)
        if state is not None and state[0] == data:
            return state[1]
        if state is not None:
            self._lib.espeak_Terminate()
        rate = self._lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, os.fsencode(data), espeakINITIALIZE_DONT_EXIT)
        if rate <= 0:
            _INITIALISED.pop(key, None)
            raise PackNotBuiltError(
                f"espeak-ng failed to initialise with data {data} (returned {rate}); the data does not match "
                f"libespeak-ng {self.lib_path.name} or is incomplete: rebuild the pack"
            )
        _INITIALISED[key] = (data, rate)
        return rate

    def _set_voice(self, voice: str) -> None:
        self._ensure_initialised()
        # A failed espeak_SetVoiceByName leaves no voice, and phonemizing without one crashes
        # the process, so a bad name must stop here.
        if self._lib.espeak_SetVoiceByName(voice.encode()) != EE_OK:
            known = ", ".join(sorted({v.file_name for v in self._list_voices()}))
            raise UnsupportedLanguageError(f"espeak-ng has no voice {voice!r}; its voices are: {known}")

    def _list_voices(self) -> list[EspeakVoice]:
        arr = self._lib.espeak_ListVoices(None)
        voices = []
        i = 0
        while arr[i]:
            v = arr[i].contents
            langs = []
            p = v.languages
            while (priority := ctypes.c_ubyte.from_address(p).value) != 0:
                code = ctypes.string_at(p + 1)
                langs.append((code.decode(), priority))
                p += len(code) + 2
            voices.append(EspeakVoice(v.name.decode(), v.identifier.decode(), tuple(langs)))
            i += 1
        return voices

    # -- public API --------------------------------------------------------------------------------

    def voices(self) -> list[EspeakVoice]:
        """Every voice in the data directory."""
        with _LOCK:
            self._ensure_initialised()
            return self._list_voices()

    def clauses(self, text: str, voice: str) -> list[EspeakClause]:
        """Split ``text`` into clauses the way espeak-ng does, with IPA phonemes for each."""
        raw = text.replace("\0", " ").encode()
        buf = ctypes.create_string_buffer(raw)
        base = ctypes.addressof(buf)
        ptr = ctypes.c_void_p(base)
        spans: list[tuple[str, int, int, bool]] = []  # phonemes, start, end (bytes consumed), last
        with _LOCK:
            self._set_voice(voice)
            while ptr.value is not None:
                start = ptr.value - base
                out = self._lib.espeak_TextToPhonemes(ctypes.byref(ptr), espeakCHARS_AUTO, espeakPHONEMES_IPA)
                end = len(raw) if ptr.value is None else ptr.value - base
                spans.append(((out or b"").decode("utf-8", errors="replace"), start, end, ptr.value is None))
        clauses = []
        begin = 0  # the clause's own text starts where the previous clause's lookahead began
        for phonemes, _start, end, last in spans:
            stop = end if last else end - _lookahead_bytes(raw, end)
            clause_text = raw[begin:stop].decode("utf-8", errors="replace")
            terminator, end_of_sentence = _terminator(clause_text, last)
            clauses.append(EspeakClause(phonemes, terminator, end_of_sentence, clause_text))
            begin = stop
        return clauses

    def sentences(self, text: str, voice: str, first_clause_alone: bool = False) -> list[EspeakSentence]:
        """Phonemes and text of each sentence, grouped as piper does; sentences without phonemes are dropped.

        ``first_clause_alone``: the first clause of a longer first sentence is its own chunk, so a
        streaming synthesizer can start speaking after one clause instead of one sentence.
        """
        sentences: list[EspeakSentence] = []
        phonemes, span = "", ""
        clauses = self.clauses(text, voice)
        for i, clause in enumerate(clauses):
            phonemes += _LANG_SWITCH.sub("", clause.phonemes) + clause.terminator
            phonemes += _NON_CLAUSE_PUNCT.get(clause.terminator, "")
            span += clause.text
            split_here = first_clause_alone and i == 0 and len(clauses) > 1
            if clause.end_of_sentence or split_here:
                sentences.append(EspeakSentence(unicodedata.normalize("NFD", phonemes), span))
                phonemes, span = "", ""
        if phonemes or span:
            sentences.append(EspeakSentence(unicodedata.normalize("NFD", phonemes), span))
        return [s for s in sentences if s.phonemes]

    def phonemize(self, text: str, voice: str) -> list[str]:
        """One IPA string per sentence, exactly what piper feeds its phoneme-id map (code point by code point)."""
        return [s.phonemes for s in self.sentences(text, voice)]

    def synthesize(self, text: str, voice: str, rate: float = 1.0) -> tuple[np.ndarray, int]:
        """espeak-ng's own formant speech, ``rate`` x the configured words per minute (capped at 450).

        Returns:
            (float32 mono samples in [-1, 1], shape [n]; sample rate in Hz). Empty text gives 0 samples.
        """
        raw = text.replace("\0", " ").encode()
        if not raw.strip():
            return np.zeros(0, dtype=np.float32), self.sample_rate
        buf = ctypes.create_string_buffer(raw)
        with _LOCK:
            self._set_voice(voice)
            self._lib.espeak_SetParameter(espeakRATE, min(450, round(self.rate_wpm * rate)), 0)
            self._lib.espeak_SetSynthCallback(self._callback)
            self._samples = chunks = []  # filled by _on_audio while espeak_Synth runs
            try:
                err = self._lib.espeak_Synth(
                    buf, len(raw) + 1, 0, POS_CHARACTER, 0, espeakCHARS_AUTO | espeakENDPAUSE, None, None
                )
            finally:
                self._samples = []
        if err != EE_OK:
            raise RuntimeError(f"espeak_Synth failed with status {err} for voice {voice!r}")
        if not chunks:
            return np.zeros(0, dtype=np.float32), self.sample_rate
        return (np.concatenate(chunks).astype(np.float32) / PCM_FULL_SCALE), self.sample_rate

    def _on_audio(self, wav, n: int, _events) -> int:
        if wav and n > 0:
            self._samples.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        return 0  # 0 = continue synthesis


def _lookahead_bytes(raw: bytes, end: int) -> int:
    """Bytes of the one character espeak read past a clause (it pushes it back for the next clause)."""
    i = end - 1
    while i > 0 and (raw[i] & 0xC0) == 0x80:  # UTF-8 continuation byte
        i -= 1
    return end - i


def _terminator(clause_text: str, last: bool) -> tuple[str, bool]:
    """(punctuation piper keeps, end of sentence) for a clause, from the text espeak consumed for it.

    Mirrors ``ReadClause`` in espeak-ng's readclause.c: a clause ends at punctuation
    followed by space (or at a run of ``?``/``!``, or at 3+ dots = ellipsis), at a
    blank line (paragraph), or at the end of the text; punctuation ends nothing
    before the clause has a letter or digit.
    """
    body = clause_text.rstrip()
    trailing = clause_text[len(body):]
    if trailing.count("\n") >= 2:
        return _PARAGRAPH
    if body and any(c.isalnum() for c in body):
        if body.endswith("..."):
            return _ELLIPSIS
        # a run like "?!" or "!!" is typed by its first mark
        i = len(body)
        while i > 0 and body[i - 1] in _QUESTION_OR_EXCLAMATION:
            i -= 1
        mark = body[i] if i < len(body) else body[-1]
        if mark in _TERMINATORS:
            return _TERMINATORS[mark]
    return ("", True) if last else ("", False)
