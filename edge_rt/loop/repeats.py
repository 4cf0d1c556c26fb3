"""A block of words Whisper wrote twice in a row, said once.

Across a hesitation Whisper may write the first half of a sentence twice ("It takes about 40 minutes. It takes
about 40 minutes. It's like rock.", "Do you have this shirt? Do you have this shirt?"): the decoder's own loop rule
(``decoding.repeated_tail``) stops only a block of 8 tokens or more, or one said three times, and it stops the decode
there, losing the words after it. A speaker seldom says three words twice in a row, and when they do (a restart:
"I want to, I want to go"), a translation says them once. Pure text: the words are compared as the scorer
normalizes them (case and punctuation aside), and the first copy is kept as written.
"""

from __future__ import annotations

from edge_rt.measure.scoring import NO_SPACE_LANGS, normalize

__all__ = ["said_once"]


def said_once(text: str, lang: str, block: int | None) -> str:
    """``text`` with every run of ``block`` or more words that follows an identical run at once left out (the
    longest such run first, then again until none is left). ``block`` None (LoopOptions.repeat_words off) and
    languages written without spaces (their words are not split on spaces) give ``text`` as is."""
    if block is None or lang.split("-")[0] in NO_SPACE_LANGS:
        return text
    words = text.split()
    norm = [normalize(w, lang) for w in words]
    found = _repeat(norm, block)
    if found is None:
        return text
    while found is not None:
        i, k = found
        del words[i + k:i + 2 * k], norm[i + k:i + 2 * k]
        found = _repeat(norm, block)
    return " ".join(words)


def _repeat(norm: list[str], block: int) -> tuple[int, int] | None:
    """(start, length) of the longest run of at least ``block`` words (none empty) followed by itself, or None."""
    n = len(norm)
    for k in range(n // 2, block - 1, -1):
        for i in range(n - 2 * k + 1):
            if norm[i:i + k] == norm[i + k:i + 2 * k] and all(norm[i:i + k]):
                return i, k
    return None
