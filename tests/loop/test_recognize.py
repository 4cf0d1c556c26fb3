"""recognize(): the babble rule drops speech out of nowhere, not the rest of a sentence after a pause."""

from __future__ import annotations

import pytest

from edge_rt.audio.clock import CaptureClock
from edge_rt.audio.files import read_audio
from edge_rt.loop.context import NONE, Context, ContextOptions
from edge_rt.loop.options import LoopOptions
from edge_rt.loop.recognize import level, recognize
from edge_rt.measure.scoring import normalize
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.units import SAMPLE_RATE


@pytest.fixture(scope="module")
def stages(default_pack):
    return load_stages(default_pack, StageOptions(precision="int8"))


@pytest.mark.slow
def test_a_fragment_after_speech_is_not_babble(stages, speech_dir):
    """JFK's "ask not", cut off by a pause (1.3 s): Whisper is unsure of it (P(no speech) 0.20,
    log-probability -1.17), as of babble; after "And so my fellow Americans" it is kept."""
    options = LoopOptions(target="pt")
    jfk = read_audio(speech_dir / "en_jfk.wav")
    start, end = int(3.10 * SAMPLE_RATE), int(4.42 * SAMPLE_RATE)
    fragment = level(jfk[start:end], options)
    alone = recognize(stages, options, fragment, end, CaptureClock())
    first = stages.asr.transcribe(fragment, language=None)
    assert first.no_speech_prob > options.unsure[0] and first.avg_logprob < options.unsure[1]  # not vacuous
    assert alone.text == "" and alone.translation == ""
    context = Context(ContextOptions())
    context.remember(int(2.24 * SAMPLE_RATE), "en", "and so my fellow American")
    follows = context.at(start)
    assert follows.follows and context.at(start + 6 * SAMPLE_RATE) is NONE
    kept = recognize(stages, options, fragment, end, CaptureClock(), follows)
    assert normalize(kept.text) == "ask not" and kept.lang == "en" and kept.translation
