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


def targets(
    *,
    asr_languages: Collection[str],
    mt_pairs: Collection[tuple[str, str]],
    tts_languages: Collection[str],
    asr_can_translate: bool,
) -> list[str]:
    """Every language the pack can produce speech in, from some source language."""
    text_out = {t for _, t in mt_pairs} | ({"en"} if asr_can_translate or "en" in asr_languages else set())
    text_out |= {l for l in asr_languages if l in {s for s, _ in mt_pairs}}  # same-language "translation"
    return sorted(t for t in text_out if t in tts_languages)


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
    reachable = targets(asr_languages=asr_languages, mt_pairs=mt_pairs, tts_languages=tts_languages,
                        asr_can_translate=asr_can_translate)
    if target not in reachable:
        raise UnsupportedLanguageError(
            f"cannot translate into {target!r}: this pack translates into {', '.join(reachable)}"
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
