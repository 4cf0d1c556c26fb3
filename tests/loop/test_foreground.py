"""foreground_start(): where the loudest talker starts in an utterance the background opened; and recognize()
decoding from there when the whole utterance gave no words (real Whisper, real speech in real babble)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.clock import CaptureClock
from edge_rt.audio.files import read_audio
from edge_rt.build.manifest import integer_products
from edge_rt.loop.foreground import ForegroundOptions, foreground_start
from edge_rt.loop.options import LoopOptions
from edge_rt.loop.recognize import level, recognize
from edge_rt.measure.noise import NoiseOptions, noisy_mixes
from edge_rt.measure.scoring import normalize
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.units import SAMPLE_RATE


def _babble(speech_dir, ids, n: int) -> np.ndarray:
    """Other clips of the set summed at the same level: a room of talkers."""
    out = np.zeros(n, np.float32)
    for cid in ids:
        x = np.resize(read_audio(speech_dir / f"{cid}.wav"), n)
        out += 0.02 * x / (np.sqrt(np.mean(x**2)) + 1e-9)
    return out


def test_the_talker_is_found_after_the_background_and_clean_speech_is_left_whole(speech_dir):
    talker = read_audio(speech_dir / "en_librispeech_1089-134686-0000.wav")
    lead = 3 * SAMPLE_RATE
    background = _babble(speech_dir, ("de_fleurs_sinnvoll", "fr_fleurs_ski", "es_fleurs_test_001"), lead + len(talker))
    mix = background.copy()
    mix[lead:] += 0.1 * talker / np.sqrt(np.mean(talker**2))  # ~12 dB over the room
    start = foreground_start(mix)
    assert start is not None and lead - SAMPLE_RATE < start <= lead, start / SAMPLE_RATE
    assert foreground_start(talker) is None  # speech from the start: nothing to trim
    assert foreground_start(mix[: 2 * SAMPLE_RATE]) is None  # shorter than min_s


def test_options_are_validated():
    with pytest.raises(ValueError, match="drop_db"):
        ForegroundOptions(drop_db=0)
    with pytest.raises(ValueError, match="smooth_s"):
        ForegroundOptions(smooth_s=0.01)


@pytest.mark.slow
def test_an_utterance_the_babble_opened_is_heard_from_where_its_talker_starts(default_pack, speech_dir,
                                                                             speech_manifest):
    """JFK at 5 dB in the noisy eval's babble (2 s of it before him): the VAD opens on the babble, and Whisper
    given the whole calls it no speech (P 0.60, log-probability -1.09 on AVX2 builds); from where he starts it hears
    him."""
    stages = load_stages(default_pack, StageOptions(precision="int8"))
    pool = {m["id"]: read_audio(speech_dir / m["audio"]) for m in speech_manifest}
    mix = next(noisy_mixes({"en_jfk": pool["en_jfk"]}, pool, NoiseOptions(kinds=("babble",), snrs_db=(5.0,))))
    said = {}
    for name, fg in (("off", None), ("on", ForegroundOptions())):
        options = LoopOptions(target="pt", foreground=fg)
        audio = level(mix.audio, options)
        said[name] = recognize(stages, options, audio, len(audio), CaptureClock()).text
    whole = stages.asr.transcribe(level(mix.audio, LoopOptions(target="pt")))
    ref = set(normalize(next(m["text"] for m in speech_manifest if m["id"] == "en_jfk"), "en").split())
    heard = set(normalize(said["on"], "en").split())
    assert len(ref & heard) >= 4, said["on"]
    if not (whole.avg_logprob < -1.0 and whole.no_speech_prob > 0.15):
        # The premise depends on the build's INT8 numerics (integer_products): on a VNNI build with the Whisper
        # decoder's uint8 twin (2026-12-05) the whole passes the gate (log-probability -0.93), so the retry is not
        # reached; foreground_start stays tested on audio (test_the_talker_is_found_after_the_background...).
        pytest.skip(f"on this build ({integer_products()} integer products) Whisper hears the whole mix (P(no speech) "
                    f"{whole.no_speech_prob:.2f}, log-probability {whole.avg_logprob:.2f}): the foreground retry has "
                    f"nothing to do here")
    assert said["off"] == ""  # not vacuous: without the retry the mix gives no words
