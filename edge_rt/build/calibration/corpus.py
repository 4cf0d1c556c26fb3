"""The committed text corpus of the calibration recipe (``calibration/sentences_<lang>.txt``).

The English and Portuguese files are parallel: line ``i`` of one translates line ``i``
of the other, so the held-out lines double as a reference set for the MT gate. Every
``HOLD_OUT_EVERY``-th sentence is held out: never used to calibrate, only to gate.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from edge_rt.build.calibration.calibrate import CalibrationError
from edge_rt.pack import repo_root

__all__ = ["CALIBRATION_DIR", "Corpus", "load_corpus"]

CALIBRATION_DIR = repo_root() / "calibration"
HOLD_OUT_EVERY = 4  # sentence i is held out when i % 4 == 3: 30 of 120 per language


@dataclass(frozen=True)
class Corpus:
    """Sentences of one language, split into calibration and held-out parts (same order in every language)."""

    lang: str
    calibration: tuple[str, ...]
    held_out: tuple[str, ...]
    sha256: str  # of the file: part of every cache key that uses it


def load_corpus(lang: str, directory: Path | None = None) -> Corpus:
    """Read ``sentences_<lang>.txt`` (``#`` lines and blank lines skipped).

    Raises:
        CalibrationError: the file is missing or holds too few sentences to split.
    """
    path = (directory or CALIBRATION_DIR) / f"sentences_{lang}.txt"
    if not path.is_file():
        have = sorted(p.stem.removeprefix("sentences_") for p in path.parent.glob("sentences_*.txt"))
        raise CalibrationError(
            f"no calibration corpus for language {lang!r}: {path} is missing (have: {', '.join(have) or 'none'}); "
            f"restore it from git (`git checkout -- calibration/`)"
        )
    raw = path.read_bytes()
    lines = [ln.strip() for ln in raw.decode("utf-8").splitlines()]
    sentences = [ln for ln in lines if ln and not ln.startswith("#")]
    if len(sentences) < 2 * HOLD_OUT_EVERY:
        raise CalibrationError(
            f"{path} holds {len(sentences)} sentences; the recipe needs at least {2 * HOLD_OUT_EVERY} "
            f"(one in {HOLD_OUT_EVERY} is held out for the accuracy gate)"
        )
    held = tuple(s for i, s in enumerate(sentences) if i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1)
    cal = tuple(s for i, s in enumerate(sentences) if i % HOLD_OUT_EVERY != HOLD_OUT_EVERY - 1)
    return Corpus(lang, cal, held, hashlib.sha256(raw).hexdigest())
