"""Fixtures of the measure tests."""

from __future__ import annotations

import pytest

from edge_rt.backends.factory import OrtEngines
from edge_rt.stages.vad import SileroVad


@pytest.fixture(scope="module")
def vad(tiny_pack):
    """The pack's Silero VAD (the tiny pack ships the same model as the default one)."""
    return SileroVad.from_pack(tiny_pack, engines=OrtEngines(tiny_pack))
