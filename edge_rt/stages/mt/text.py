"""Text handling around the MT model: sentence splitting and re-joining.

Bergamot translates sentence by sentence; doing the same keeps every source inside the
static length buckets and matches how the students were trained (one sentence per line).
"""

from __future__ import annotations

import re
from typing import Iterator

# A sentence ends at . ! ? … (optionally followed by closing quotes/brackets) before whitespace
# and a word that does not start in lower case ("3 p.m. on Monday" stays whole).
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’»)\]]*\s+(?=[^\s])(?![a-zà-ÿ])")
# A "." after these (or after a single letter, an initial) does not end a sentence: a small
# stand-in for the non-breaking-prefix lists of Bergamot's sentence splitter.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr sra srta jr st mt no nr vs etc fig approx dept est inc ltd co corp "
    "jan feb mar apr jun jul aug sep sept oct nov dec av ave rd".split()
)
_LAST_WORD = re.compile(r"(\w+)\.[\"'”’»)\]]*$")


def _ends_sentence(before: str) -> bool:
    m = _LAST_WORD.search(before)
    if m is None:  # ends in ! ? … or a non-word before the dot
        return True
    word = m.group(1)
    return not (len(word) == 1 and word.isalpha()) and word.lower() not in _ABBREVIATIONS


def split_sentences(text: str) -> Iterator[list[str]]:
    """Yield, per non-empty line of ``text``, its sentences (stripped, non-empty, in order)."""
    for line in text.splitlines():
        if not line.strip():
            continue
        sentences = []
        pos = 0
        for m in _SENTENCE_END.finditer(line):
            end = m.start() + len(m.group(0).rstrip())
            if not _ends_sentence(line[pos:end]):
                continue
            sentences.append(line[pos:end].strip())
            pos = m.end()
        sentences.append(line[pos:].strip())
        yield [s for s in sentences if s]


def join_sentences(lines: list[list[str]]) -> str:
    """Inverse of :func:`split_sentences`: sentences joined by a space, lines by newlines."""
    return "\n".join(" ".join(s for s in line if s) for line in lines)
