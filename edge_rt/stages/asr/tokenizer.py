"""Whisper's tokenizer: ``tokenizer.json`` (via ``tokenizers``) plus its special tokens.

Token ids differ between English-only and multilingual models (e.g. ``<|endoftext|>``
is 50256 vs 50257), so every special id is looked up by name, never hard-coded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from edge_rt.errors import PackNotBuiltError

TASKS = ("transcribe", "translate")
# Marks that end a sentence in Whisper's output (Latin and CJK full-width): the decoder's end-mark
# probability and the turn policy's reading of a transcript both use these.
SENTENCE_FINAL = (".", "?", "!", "。", "？", "！")


def has_words(text: str) -> bool:
    """Whether ``text`` says anything: a letter or digit in it (not "", not a lone "." Whisper writes on noise)."""
    return any(c.isalnum() for c in text)


# Symbols that are never speech: speaker tags, music notes, brackets (as OpenAI
# Whisper's and faster-whisper's ``non_speech_tokens``; suppressed by ``suppress_tokens=(-1,)``).
_NON_SPEECH_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
)
# U+2640..U+267F symbols share their first UTF-8 bytes, so suppressing the first token is safe.
_MISC_SYMBOLS = "♩♪♫♬♭♮♯"


def language_codes(tokenizer, lang_ids: Iterable[int]) -> list[str]:
    """``["en", "zh", ...]`` from the language-token ids listed in a CTranslate2 ``config.json``."""
    codes = []
    for i in lang_ids:
        token = tokenizer.id_to_token(int(i)) or ""
        if token.startswith("<|") and token.endswith("|>"):
            codes.append(token[2:-2])
    return codes


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of Whisper's control tokens in one vocabulary."""

    sot: int
    eot: int
    transcribe: int
    translate: int
    sot_lm: int
    sot_prev: int
    no_timestamps: int
    no_speech: int

    @property
    def timestamp_begin(self) -> int:
        """``<|0.00|>``: Whisper's 1501 timestamp tokens (0.02 s apart) follow ``<|notimestamps|>`` in every
        vocabulary, listed in ``tokenizer.json`` or not (tiny.en's lacks them; the model's logits have them)."""
        return self.no_timestamps + 1


class WhisperTokenizer:
    """Text <-> token ids, prompts and suppression lists for one Whisper model.

    Args:
        path: ``tokenizer.json``.
        lang_ids: ids of the language tokens (``config.json``'s ``lang_ids``); used only
            when ``multilingual``.
        multilingual: False for the ``*.en`` models (prompt is ``<|startoftranscript|>`` only).
    """

    def __init__(self, path: str | Path, lang_ids: Sequence[int], multilingual: bool):
        from tokenizers import Tokenizer

        path = Path(path)
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception on a bad file
            raise PackNotBuiltError(f"Whisper tokenizer {path} is unreadable ({e}); rebuild the pack") from e
        self.multilingual = multilingual
        self.special = SpecialTokens(
            sot=self._id("<|startoftranscript|>"),
            eot=self._id("<|endoftext|>"),
            transcribe=self._id("<|transcribe|>"),
            translate=self._id("<|translate|>"),
            sot_lm=self._id("<|startoflm|>"),
            sot_prev=self._id("<|startofprev|>"),
            no_timestamps=self._id("<|notimestamps|>"),
            no_speech=self._id("<|nospeech|>", "<|nocaptions|>"),
        )
        codes = language_codes(self._tok, lang_ids) if multilingual else ["en"]
        self.languages: tuple[str, ...] = tuple(codes)
        self.language_ids: tuple[int, ...] = tuple(self._id(f"<|{c}|>") for c in codes) if multilingual else ()

    def _id(self, *names: str) -> int:
        for name in names:
            i = self._tok.token_to_id(name)
            if i is not None:
                return i
        raise PackNotBuiltError(f"tokenizer has no {' / '.join(names)} token: it is not a Whisper tokenizer")

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, tokens: Iterable[int]) -> str:
        """Text of the text tokens (ids below ``<|endoftext|>``); control tokens are dropped."""
        return self._tok.decode([t for t in tokens if t < self.special.eot])

    def prompt(self, language: str, task: str, timestamps: bool = False) -> list[int]:
        """Start sequence, e.g. ``[sot, <|de|>, <|translate|>, <|notimestamps|>]``; with ``timestamps`` the
        last token is left out and the decoder writes timestamp tokens around its segments."""
        s = self.special
        tail = [] if timestamps else [s.no_timestamps]
        if not self.multilingual:
            return [s.sot, *tail]
        task_id = s.transcribe if task == "transcribe" else s.translate
        return [s.sot, self.language_ids[self.languages.index(language)], task_id, *tail]

    def previous_text(self, text: str, max_tokens: int) -> list[int]:
        """The last ``max_tokens`` text tokens of ``text`` (a leading space added, as faster-whisper's
        ``initial_prompt``), for the decoder to condition on after ``<|startofprev|>``."""
        if max_tokens <= 0 or not text.strip():
            return []
        return self.encode(" " + text.strip())[-max_tokens:]

    def non_speech_tokens(self) -> list[int]:
        """First tokens of non-speech symbols; ``" -"`` and ``" '"`` too (allowed only inside words)."""
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in _NON_SPEECH_SYMBOLS + list(_MISC_SYMBOLS):
            for tokens in (self.encode(symbol), self.encode(" " + symbol)):
                if len(tokens) == 1 or symbol in _MISC_SYMBOLS:
                    result.add(tokens[0])
        return sorted(result)

    def suppress_tokens(self, requested: Sequence[int]) -> list[int]:
        """Ids never sampled: ``requested`` (``-1`` = the non-speech set) plus the control tokens."""
        ids = {t for t in requested if t >= 0}
        if -1 in requested:
            ids.update(self.non_speech_tokens())
        s = self.special
        ids.update([s.transcribe, s.translate, s.sot, s.sot_prev, s.sot_lm, s.no_speech])
        return sorted(ids)

    def final_mark_tokens(self) -> list[int]:
        """Ids of the :data:`SENTENCE_FINAL` marks that are one token each."""
        ids = (self.encode(m) for m in SENTENCE_FINAL)
        return sorted({t[0] for t in ids if len(t) == 1})

    def blank_tokens(self) -> list[int]:
        """Suppressed at the first sampled position: a lone space and ``<|endoftext|>``."""
        return [*self.encode(" "), self.special.eot]
