"""The paused-speech set: pauses inside the speech, of the right length, of room tone, the same on every run."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.measure.bench import oracle_end
from edge_rt.measure.oracle import speech_span
from edge_rt.measure.paused import PausedClip, PauseOptions, insert_pauses, pause_candidates, paused_clip, room_tone
from edge_rt.units import SAMPLE_RATE, VAD_FRAME

S = SAMPLE_RATE


@pytest.fixture(scope="module")
def clips(speech_manifest, speech_dir):
    """Six real clips: English LibriSpeech and FLEURS, German and Mandarin FLEURS (zero-padded ones too)."""
    wanted = ["en_jfk", "en_librispeech_1089-134686-0000", "en_fleurs_1728", "en_fleurs_luna", "zh_fleurs_1883",
              "es_fleurs_test_001"]
    by_id = {m["id"]: m for m in speech_manifest}
    return [(i, read_audio(speech_dir / by_id[i]["audio"])) for i in wanted]


@pytest.fixture(scope="module")
def paused(clips, vad) -> list[tuple[np.ndarray, PausedClip]]:
    out = []
    for clip_id, audio in clips:
        item = paused_clip(clip_id, audio, vad)
        assert item is not None, f"{clip_id}: no pause point found"
        out.append((audio, item))
    return out


def test_each_pause_lies_inside_the_speech_away_from_its_ends(paused, vad):
    opts = PauseOptions()
    edge = opts.edge_ms * S // 1000
    for audio, item in paused:
        assert len(item.pauses) == opts.pauses
        (a, b), = item.pauses
        assert item.speech_start + edge <= a and b <= item.final_end - edge, item.id
        # the real speech region of the original clip, from the VAD itself (the bench's oracle)
        probs = vad.probabilities(audio)
        start, end = speech_span(probs, len(audio))
        assert start + edge <= item.source_points[0] <= end - edge
        # inside a VAD speech run (flowing speech), not inside a pause the speaker already made
        assert probs[item.source_points[0] // VAD_FRAME] >= 0.5, item.id


def test_pauses_have_the_asked_length_and_the_speech_is_untouched(paused):
    n = PauseOptions().pause_samples
    assert n == int(0.6 * S)
    for audio, item in paused:
        (a, b), = item.pauses
        p = item.source_points[0]
        assert b - a == n and len(item.audio) == len(audio) + n
        assert a == p
        np.testing.assert_array_equal(item.audio[:a], audio[:p])
        np.testing.assert_array_equal(item.audio[b:], audio[p:])


def test_the_final_end_is_where_the_vad_hears_the_last_speech(paused, vad):
    for _, item in paused:
        # within 3 frames: the inserted pause (600 ms, not a whole number of 32 ms frames) moves the frame grid, and
        # en_jfk's speech ends in a one-frame run at p 0.53 after a one-frame dip, which the shifted grid can miss
        assert abs(oracle_end(vad, item.audio) - item.final_end) <= 3 * VAD_FRAME, item.id


def test_the_pause_is_room_tone_the_vad_hears_as_a_pause(paused, vad):
    for audio, item in paused:
        (a, b), = item.pauses
        fill = item.audio[a:b].astype(np.float64)
        middle = fill[len(fill) // 4 : -len(fill) // 4]
        level = 10 * np.log10(np.mean(middle**2) + 1e-20)
        assert -100 < level < -40, f"{item.id}: fill at {level:.0f} dBFS is not background"
        assert abs(level - item.fill_dbfs) < 6, item.id  # the level of the clip's own quietest background
        # no run of digital zeros longer than 2 ms (some clips are zero-padded: that padding is not room tone)
        zero = np.concatenate([[0], (middle == 0).astype(np.int8), [0]])
        runs = np.flatnonzero(np.diff(zero) == -1) - np.flatnonzero(np.diff(zero) == 1)
        assert runs.max(initial=0) < 32, item.id
        # the VAD calls most of the pause silence (Silero lingers a few frames after speech)
        probs = vad.probabilities(item.audio)[a // VAD_FRAME + 1 : b // VAD_FRAME]
        assert np.mean(probs < 0.5) >= 0.5, f"{item.id}: the VAD hears speech in the pause"


def test_the_set_is_reproducible_and_the_seed_changes_it(clips, vad):
    first = [paused_clip(i, a, vad) for i, a in clips]
    again = [paused_clip(i, a, vad) for i, a in reversed(clips)][::-1]  # order does not matter
    for x, y in zip(first, again):
        assert x.pauses == y.pauses
        np.testing.assert_array_equal(x.audio, y.audio)
    other = [paused_clip(i, a, vad, PauseOptions(seed=1)) for i, a in clips]
    assert any(x.source_points != y.source_points or not np.array_equal(x.audio, y.audio)
               for x, y in zip(first, other))


def test_two_pauses_are_apart_and_both_inside(clips, vad):
    opts = PauseOptions(pauses=2, pause_ms=800)
    clip_id, audio = clips[1]  # 10 s of LibriSpeech: room for two
    item = paused_clip(clip_id, audio, vad, opts)
    (a1, b1), (a2, b2) = item.pauses
    assert b1 - a1 == b2 - a2 == int(0.8 * S)
    assert item.source_points[1] - item.source_points[0] >= opts.min_gap_ms * S // 1000
    assert a2 == item.source_points[1] + (b1 - a1)  # the second span counts the first pause
    assert item.final_end == oracle_end(vad, audio) + 2 * int(0.8 * S)
    assert item.in_pause(a1) and item.in_pause(b2 - 1) and not item.in_pause(b1 + 10)


class _Probs:
    def __init__(self, probs):
        self.p = np.asarray(probs, np.float32)

    def probabilities(self, audio):
        return self.p


def _syllables(gaps_db: list[float]) -> np.ndarray:
    """0.3 s tones separated by 0.1 s dips at the given level below the tones (float32, 16 kHz)."""
    rng = np.random.default_rng(0)
    parts = []
    for g in [None] + gaps_db:
        if g is not None:
            parts.append(rng.normal(0, 0.1 * 10 ** (-g / 20), int(0.1 * S)))
        parts.append(0.1 * np.sin(2 * np.pi * 220 * np.arange(int(0.3 * S)) / S) + rng.normal(0, 1e-3, int(0.3 * S)))
    return np.concatenate(parts).astype(np.float32)


def test_candidates_are_the_deep_dips_inside_flowing_speech_only():
    audio = _syllables([30, 5, 40, 30, 30, 30])  # dips at 0.3, 0.7, 1.1, 1.5, 1.9, 2.3 s (+0.05 s centre)
    frames = -(-len(audio) // VAD_FRAME)
    probs = np.ones(frames, np.float32)
    probs[int(1.9 * S) // VAD_FRAME : int(2.0 * S) // VAD_FRAME + 1] = 0.1  # the VAD already hears a pause there
    found = pause_candidates(audio, probs, PauseOptions(edge_ms=500))
    inside = lambda p, a: a * S <= p < (a + 0.1) * S  # noqa: E731
    # the 40 dB gap at 1.1 s and the 30 dB one at 1.5 s; not 0.3 s (too close to the start), 0.7 s (5 dB: a
    # vowel, not a gap), 1.9 s (the VAD already hears a pause) nor 2.3 s (too close to the end)
    assert all(inside(p, 1.1) or inside(p, 1.5) for p, _ in found), found
    assert any(inside(p, 1.1) for p, _ in found) and any(inside(p, 1.5) for p, _ in found)
    assert inside(found[0][0], 1.1) and 35 < found[0][1] < 45  # deepest first, its depth in dB
    assert pause_candidates(audio, np.zeros(frames, np.float32)) == []  # no speech, no candidates


def test_no_pause_point_gives_none_and_options_are_checked():
    short = _syllables([30])  # 0.7 s of speech: nothing 0.5 s from both ends
    assert paused_clip("short", short, _Probs(np.ones(-(-len(short) // VAD_FRAME)))) is None
    with pytest.raises(ValueError, match="pause_ms"):
        PauseOptions(pause_ms=0)
    with pytest.raises(ValueError, match="fade_ms"):
        PauseOptions(fill_window_ms=4)


def test_room_tone_of_digital_silence_is_low_noise_not_zeros():
    tone, level = room_tone(np.zeros(S, np.float32), 1000, PauseOptions(), np.random.default_rng(0))
    assert len(tone) == 1000 and np.count_nonzero(tone) > 900 and -80 < level < -70
    out, spans = insert_pauses(np.arange(10, dtype=np.float32), [3, 7], [np.full(2, -1, np.float32)] * 2)
    assert spans == [(3, 5), (9, 11)]
    assert out.tolist() == [0, 1, 2, -1, -1, 3, 4, 5, 6, -1, -1, 7, 8, 9]
