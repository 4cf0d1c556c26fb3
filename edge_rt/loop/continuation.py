"""The new part of a transcript that was decoded together with audio whose text is already known.

A pause splits a sentence into utterances, and a fragment decoded on its own loses its sentence:
"However" / "Did you do the slow communication channel?" where the whole reads "However, due to the
slow communication channels". The loop therefore decodes an utterance that follows the previous one
closely together with the previous one's audio (``ContextOptions.joint``) and keeps what comes after
the previous text. This module finds that point: the cut of the joint transcript whose beginning is
closest to the known text (word edit distance over normalized words, the longest such beginning on a
tie), and judges the match (edits per known word).

Pure text. Languages written without spaces (Chinese, Japanese, Thai, ...) are not split into words
here: :func:`continuation` answers None for them and the loop decodes the utterance on its own.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from edge_rt.measure.scoring import NO_SPACE_LANGS, normalize

__all__ = ["Continuation", "continuation"]

_LEADING = ".,;:!?-…–— "  # what a continuation does not start with ("America... ...ask not")


class Continuation(NamedTuple):
    text: str  # the joint transcript after the known text ("" when nothing follows it)
    cost: float  # word edits between the known text and the joint transcript's beginning, per known word


def continuation(known: str, joint: str, lang: str) -> Continuation | None:
    """Where ``known`` ends at the start of ``joint`` (both in ``lang``), and what follows it.

    None when the language is written without spaces or ``known`` holds no words.
    """
    if lang.split("-")[0] in NO_SPACE_LANGS:
        return None
    kw = [w for w in (normalize(w, lang) for w in known.split()) if w]
    if not kw:
        return None
    words = joint.split()
    at = [i for i, w in enumerate(words) if normalize(w, lang)]  # words that are not only punctuation
    jw = [normalize(words[i], lang) for i in at]
    # d[j]: edits between the known words and the first j joint words (one DP row per known word).
    d = np.arange(len(jw) + 1)
    for i, k in enumerate(kw, start=1):
        row = np.empty_like(d)
        row[0] = i
        for j, w in enumerate(jw, start=1):
            row[j] = min(d[j] + 1, row[j - 1] + 1, d[j - 1] + (k != w))
        d = row
    cut = max(range(len(d)), key=lambda j: (-d[j], j))  # fewest edits, then the longest beginning
    rest = " ".join(words[at[cut]:]) if cut < len(jw) else ""
    return Continuation(rest.lstrip(_LEADING), float(d[cut]) / len(kw))
