"""Shared fixtures: real speech clips and built model packs.

Tests run real weights. The packs must be built first
(`python tools/build_engines.py --pack tiny` and `--pack default`; `.ci/run`
does it); a missing pack is an error, never a skip.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edge_rt.pack import BuiltPack

REPO = Path(__file__).resolve().parents[1]
SPEECH_DIR = Path(os.environ.get("EDGE_RT_SPEECH", REPO.parent / "shared" / "data" / "speech"))


def _manifest() -> list[dict]:
    path = SPEECH_DIR / "manifest.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"the real-speech set is missing: {path}; set EDGE_RT_SPEECH to the folder that holds manifest.jsonl"
        )
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def speech_dir() -> Path:
    return SPEECH_DIR


@pytest.fixture(scope="session")
def speech_manifest() -> list[dict]:
    """Entries of ../shared/data/speech/manifest.jsonl (id, audio, lang, text, ...)."""
    return _manifest()


@pytest.fixture(scope="session")
def english_clips(speech_manifest) -> list[dict]:
    return [m for m in speech_manifest if m["lang"] == "en"]


@pytest.fixture(scope="module")
def jack():
    """A JACK dummy sound card for live-audio tests (started unless one runs; see tests/jack.py)."""
    from tests.jack import ensure_jack

    proc = ensure_jack()
    yield
    if proc is not None:
        proc.terminate()
        proc.wait(5)


@pytest.fixture(scope="session")
def default_pack() -> BuiltPack:
    return BuiltPack.load("default")


@pytest.fixture(scope="session")
def tiny_pack() -> BuiltPack:
    return BuiltPack.load("tiny")
