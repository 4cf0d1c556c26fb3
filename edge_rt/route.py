"""Which stages a translation takes, from the source and target languages.

Whisper's ``translate`` task turns any of its languages into English; the
pack's Marian models cover en↔pt. Portuguese from another language pivots
through English. Pure logic, no models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection

from edge_rt.errors import UnsupportedLanguageError


@dataclass(frozen=True)
class Route:
    """How one utterance in ``source`` becomes speech in ``target``."""

    source: str
    target: str
    asr_task: str  # "transcribe" (text in the source language) | "translate" (Whisper → English)
    mt_pair: tuple[str, str] | None  # Marian pair applied to the ASR text, if any

    @property
    def stages(self) -> str:
        parts = [f"asr:{self.asr_task}"]
        if self.mt_pair:
            parts.append(f"mt:{self.mt_pair[0]}-{self.mt_pair[1]}")
        return " → ".join(parts + [f"tts:{self.target}"])


def plan_route(
    source: str,
    target: str,
    *,
    asr_languages: Collection[str],
    mt_pairs: Collection[tuple[str, str]],
    tts_languages: Collection[str],
    asr_can_translate: bool,
) -> Route:
    """The cheapest route from ``source`` to ``target`` with what the pack has.

    Raises :class:`UnsupportedLanguageError` naming what is possible.
    """
    if target not in tts_languages:
        raise UnsupportedLanguageError(
            f"cannot speak target language {target!r}: this pack speaks {', '.join(sorted(tts_languages))}"
        )
    if source not in asr_languages:
        raise UnsupportedLanguageError(
            f"cannot recognise source language {source!r}: this pack's ASR knows "
            f"{', '.join(sorted(asr_languages))}"
        )
    if source == target:
        return Route(source, target, "transcribe", None)
    if (source, target) in mt_pairs:
        return Route(source, target, "transcribe", (source, target))
    if asr_can_translate and target == "en":
        return Route(source, target, "translate", None)
    if asr_can_translate and ("en", target) in mt_pairs:
        return Route(source, target, "translate", ("en", target))
    reachable = sorted({t for s, t in mt_pairs if s == source} | ({"en"} if asr_can_translate else set()) | {source})
    raise UnsupportedLanguageError(
        f"no route from {source!r} to {target!r} in this pack; from {source!r} it reaches {', '.join(reachable)}"
    )
