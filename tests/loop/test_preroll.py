"""preroll.py: an utterance that opens out of noise starts further back; out of a quiet room it does not."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.loop.history import History
from edge_rt.loop.options import LoopOptions
from edge_rt.loop.preroll import NoisyPrerollOptions, noisy_start, opening_snr_db
from edge_rt.measure.noise import NoiseOptions, noisy_mixes
from edge_rt.measure.noise_eval import run_loop
from edge_rt.measure.scoring import normalize
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.units import SAMPLE_RATE as SR

O = NoisyPrerollOptions()  # 128 ms more below 20 dB


def _history(noise_rms: float, speech_at: float, speech_rms: float = 0.05, seconds: float = 3.0) -> History:
    """Steady noise, and louder noise standing in for speech from ``speech_at`` seconds."""
    rng = np.random.default_rng(5)
    audio = noise_rms * rng.standard_normal(int(seconds * SR))
    a = int(speech_at * SR)
    audio[a:] += speech_rms * rng.standard_normal(len(audio) - a)
    h = History(1 << 17)
    h.write(0, audio.astype(np.float32))
    return h


def _start(h: History, floor: int = 0, options: NoisyPrerollOptions = O) -> int:
    opened = 2 * SR  # the VAD's first speech frame; the endpointer's start is 192 ms before it
    return noisy_start(h, opened - 3072, opened, opened + 1024, floor, options)


def test_out_of_noise_the_start_moves_back_and_out_of_a_quiet_room_it_does_not():
    assert _start(_history(0.01, 2.0)) == 2 * SR - 3072 - 2048  # 14 dB over the noise: 128 ms more
    assert _start(_history(0.0005, 2.0)) == 2 * SR - 3072  # 40 dB: the plain pre-roll
    assert _start(_history(0.0, 2.0)) == 2 * SR - 3072  # digital silence before: +inf dB
    assert _start(_history(0.01, 2.0), options=NoisyPrerollOptions(below_db=10.0)) == 2 * SR - 3072


def test_the_start_never_reaches_into_the_previous_utterance():
    h, start = _history(0.01, 2.0), 2 * SR - 3072
    longer = NoisyPrerollOptions(extra_ms=400)  # 6400 samples
    assert _start(h, floor=start - 8000, options=longer) == start - 6400
    assert _start(h, floor=start - 4000, options=longer) == start - 4000  # only back to the previous end
    # Less than min_noise_s (0.2 s) since the previous utterance: nothing to measure the noise on, no extra.
    assert _start(h, floor=start - 3000, options=longer) == start


def test_levels_and_options():
    rng = np.random.default_rng(0)
    before, opening = 0.01 * rng.standard_normal(SR), 0.1 * rng.standard_normal(1024)
    assert 18 < opening_snr_db(before, opening) < 24  # the loudest opening frame over the median noise frame
    assert np.isnan(opening_snr_db(before[:100], opening))  # less than one 20-ms frame
    with pytest.raises(ValueError, match="extra_ms"):
        NoisyPrerollOptions(extra_ms=0)
    with pytest.raises(ValueError, match="min_noise_s"):
        NoisyPrerollOptions(min_noise_s=2.0)


@pytest.mark.slow
def test_a_quiet_talker_in_pink_noise_is_heard_from_the_start(default_pack, speech_dir, speech_manifest):
    """en_fleurs_luna in the noisy eval's pink noise at 5 dB: the VAD opens ~0.45 s late in the sentence. With
    the plain pre-roll the loop's utterance starts inside "fellow" (it came back empty in the eval); from
    128 ms further back Whisper hears the sentence."""
    stages = load_stages(default_pack, StageOptions(precision="int8"))
    pool = {m["id"]: read_audio(speech_dir / m["audio"]) for m in speech_manifest}
    mix = next(noisy_mixes({"en_fleurs_luna": pool["en_fleurs_luna"]}, pool,
                           NoiseOptions(kinds=("pink",), snrs_db=(5.0,))))
    runs = {}
    for name, pre in (("plain", None), ("noisy", NoisyPrerollOptions())):
        options = dataclasses.replace(LoopOptions(target="pt", partials=False), noisy_preroll=pre)
        traces, _ = run_loop(stages, mix.audio, options)
        runs[name] = traces
        print(name, [(t.start_sample, t.end_sample, t.text, t.dropped) for t in traces])
    plain, noisy = runs["plain"][0], runs["noisy"][0]
    assert noisy.start_sample == plain.start_sample - 2048  # 128 ms further back, the same opening
    ref = set(normalize(next(m["text"] for m in speech_manifest if m["id"] == "en_fleurs_luna"), "en").split())
    heard = set(normalize(" ".join(t.text for t in runs["noisy"]), "en").split())
    assert len(ref & heard) >= 2, runs["noisy"]
