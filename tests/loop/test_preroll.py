"""preroll.py: an utterance that opens out of noise starts further back; out of a quiet room it does not, unless
its pre-roll starts inside a sound, and then it starts where that sound does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.loop.history import History
from edge_rt.loop.options import LoopOptions
from edge_rt.loop.preroll import NoisyPrerollOptions, SoundStartOptions, noisy_start, opening_snr_db, sound_start
from edge_rt.measure.noise import NoiseOptions, noisy_mixes
from edge_rt.measure.noise_eval import run_loop
from edge_rt.measure.scoring import normalize
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.units import SAMPLE_RATE as SR

O = NoisyPrerollOptions()  # 128 ms more below 20 dB
OPENED = 2 * SR  # the VAD's first speech frame in every history below; the endpointer's start is 192 ms before it


def _as_history(audio: np.ndarray) -> History:
    h = History(1 << 17)
    h.write(0, audio.astype(np.float32))
    return h


def _history(noise_rms: float, speech_at: float, speech_rms: float = 0.05, seconds: float = 3.0) -> History:
    """Steady noise, and louder noise standing in for speech from ``speech_at`` seconds."""
    rng = np.random.default_rng(5)
    audio = noise_rms * rng.standard_normal(int(seconds * SR))
    a = int(speech_at * SR)
    audio[a:] += speech_rms * rng.standard_normal(len(audio) - a)
    return _as_history(audio)


def _start(h: History, floor: int = 0, options: NoisyPrerollOptions = O) -> int:
    return noisy_start(h, OPENED - 3072, OPENED, OPENED + 1024, floor, options)


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


S = SoundStartOptions()  # back to where a sound 10 dB over the floor starts, at most 320 ms, out of quiet


def _room(onset_s: float, onset_rms: float = 0.01, floor_rms: float = 0.0005, seconds: float = 3.0) -> History:
    """A quiet room (-66 dBFS), a soft onset from ``onset_s`` (-40 dBFS: a fricative the VAD scores low) and loud
    speech (-20 dBFS) from 2 s, where the VAD opens."""
    rng = np.random.default_rng(7)
    audio = floor_rms * rng.standard_normal(int(seconds * SR))
    a, b = int(onset_s * SR), 2 * SR
    audio[a:b] += onset_rms * rng.standard_normal(b - a)
    audio[b:] += 0.1 * rng.standard_normal(len(audio) - b)
    return _as_history(audio)


def _sound(h: History, floor: int = 0, options: SoundStartOptions = S) -> int:
    return sound_start(h, OPENED - 3072, OPENED, OPENED + 1024, floor, options)


def test_a_pre_roll_that_starts_inside_a_sound_moves_back_to_where_it_starts():
    start, frame = 2 * SR - 3072, SR // 50
    # The onset began 272 ms before the VAD opened, 80 ms before the pre-roll: back by whole 20-ms frames
    # over it, and the quiet frame before it.
    onset = 2 * SR - int(0.272 * SR)
    moved = _sound(_room(2.0 - 0.272))
    assert moved < onset <= moved + frame, (moved, onset)
    assert _sound(_room(1.9)) == start  # the onset inside the pre-roll: nothing to move
    assert _sound(_room(1.45)) == start - 320 * SR // 1000  # a sound longer than max_ms: max_ms back
    # Never into the previous utterance: here all since it was sound, so no floor is measured and nothing moves.
    assert start - 4000 <= _sound(_room(1.45), floor=start - 4000) <= start
    assert _sound(_room(1.75, onset_rms=0.0008)) == start  # 4 dB over the floor: room tone, not a sound
    assert _sound(_room(1.75), options=SoundStartOptions(above_db=30.0)) == start


def test_out_of_noise_or_with_nothing_to_measure_the_start_stays():
    start = 2 * SR - 3072
    # The speech 14 dB over the floor: noise, noisy_start's business.
    assert _sound(_room(1.75, floor_rms=0.02)) == start
    # Less than min_noise_s (0.2 s) since the previous utterance.
    assert _sound(_room(1.75), floor=start - 3000) == start
    # Digital silence (a file's padding, a gated input) is no room: nothing to measure the floor on, no move ...
    rng = np.random.default_rng(3)
    audio = np.zeros(3 * SR, np.float32)
    audio[int(1.75 * SR):] = 0.01 * rng.standard_normal(int(1.25 * SR))
    audio[2 * SR:] *= 10
    assert _sound(_as_history(audio)) == start
    # ... and its frames are left out of the floor: room tone after it is measured as the room.
    audio[int(1.5 * SR): int(1.75 * SR)] = 0.0005 * rng.standard_normal(SR // 4)
    assert _sound(_as_history(audio)) < 1.75 * SR
    with pytest.raises(ValueError, match="above_db"):
        SoundStartOptions(above_db=0.0)
    with pytest.raises(ValueError, match="max_ms"):
        SoundStartOptions(max_ms=0)


@pytest.mark.slow
def test_a_soft_first_word_is_heard_whole(default_pack, speech_dir, speech_manifest):
    """en_librispeech_1089-134686-0001, "Stuff it into you": Silero scores the soft "Stuff" 0.1-0.4 and opens on
    "it", 224 ms after the word began, so the 192-ms pre-roll starts inside it and Whisper writes "Stuffed into
    you". Starting where the sound does, it hears "Stuff it"."""
    stages = load_stages(default_pack, StageOptions(precision="int8"))
    clip = next(m for m in speech_manifest if m["id"] == "en_librispeech_1089-134686-0001")
    audio = read_audio(speech_dir / clip["audio"])
    runs = {}
    for name, opt in (("plain", None), ("sound", SoundStartOptions())):
        options = dataclasses.replace(LoopOptions(target="pt", source="en", partials=False), sound_start=opt)
        traces, _ = run_loop(stages, audio, options)
        runs[name] = traces
        print(name, [(t.start_sample, t.end_sample, t.text) for t in traces])
    plain, sound = runs["plain"][0], runs["sound"][0]
    assert sound.start_sample < plain.start_sample
    assert normalize(sound.text, "en").startswith("stuff it into you"), sound.text
    assert not normalize(plain.text, "en").startswith("stuff it"), plain.text  # what the rule changes
