"""Text normalisation and error rates (WER/CER via jiwer) for ASR evaluation.

References in ``shared/data/speech`` mix conventions (LibriSpeech upper case without
punctuation, FLEURS normalised lower case, some cased and punctuated), so both sides
are normalised the same way before scoring: lower case, punctuation removed,
whitespace collapsed; for languages written without spaces the score is a CER over
characters with whitespace removed. Numbers and spellings are not normalised
("12" vs "twelve" counts as an error).
"""

from __future__ import annotations

import unicodedata
from typing import Sequence

__all__ = ["normalize", "wer", "cer", "error_rate", "NO_SPACE_LANGS"]

NO_SPACE_LANGS = frozenset({"zh", "ja", "th", "lo", "my", "yue"})  # scored by CER


def normalize(text: str, lang: str = "en") -> str:
    """Lower case, every Unicode punctuation character replaced by a space, whitespace collapsed.

    For :data:`NO_SPACE_LANGS` all whitespace is removed as well.
    """
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if unicodedata.category(c).startswith("P") else c for c in text)
    joiner = "" if lang.split("-")[0] in NO_SPACE_LANGS else " "
    return joiner.join(text.split())


def _prepare(refs: Sequence[str], hyps: Sequence[str], lang: str | None) -> tuple[list[str], list[str]]:
    if isinstance(refs, str) or isinstance(hyps, str):
        raise TypeError("refs and hyps are sequences of strings (one per utterance), not single strings")
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses; they must pair one to one")
    if lang is not None:
        refs = [normalize(r, lang) for r in refs]
        hyps = [normalize(h, lang) for h in hyps]
    empty = [i for i, r in enumerate(refs) if not r.strip()]
    if empty:
        raise ValueError(f"references {empty} are empty after normalisation; an error rate needs reference words")
    return list(refs), list(hyps)


def wer(refs: Sequence[str], hyps: Sequence[str], lang: str | None = "en") -> float:
    """Corpus word error rate (total edits / total reference words).

    Args:
        refs, hyps: one string per utterance.
        lang: normalise both with :func:`normalize` for this language; None = already normalised.
    """
    import jiwer

    refs, hyps = _prepare(refs, hyps, lang)
    return float(jiwer.wer(refs, hyps))


def cer(refs: Sequence[str], hyps: Sequence[str], lang: str | None = "zh") -> float:
    """Corpus character error rate (total edits / total reference characters); see :func:`wer`."""
    import jiwer

    refs, hyps = _prepare(refs, hyps, lang)
    return float(jiwer.cer(refs, hyps))


def error_rate(refs: Sequence[str], hyps: Sequence[str], lang: str) -> tuple[str, float]:
    """(``"wer"`` or ``"cer"``, the corpus rate in % rounded to 2 places) for ``lang``: CER for the
    languages written without spaces (a region suffix such as ``zh-CN`` counts as its language)."""
    no_space = lang.split("-")[0] in NO_SPACE_LANGS
    if no_space:
        return "cer", round(100 * cer(refs, hyps, lang), 2)
    return "wer", round(100 * wer(refs, hyps, lang), 2)
