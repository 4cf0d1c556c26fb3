"""split.py: a transcript too sparse for its utterance is decoded again in pieces cut at its quietest moments."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from edge_rt.audio.clock import CaptureClock
from edge_rt.audio.files import read_audio
from edge_rt.loop.options import LoopOptions
from edge_rt.loop.recognize import _tokens, level, recognize
from edge_rt.loop.split import SplitOptions, cuts, sparse
from edge_rt.measure.scoring import normalize
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.units import SAMPLE_RATE as SR


def _bursts(*spans: tuple[float, float, float], seconds: float = 6.0) -> np.ndarray:
    """Seconds of quiet noise with louder noise in (start, end, amplitude) spans."""
    rng = np.random.default_rng(3)
    audio = 0.001 * rng.standard_normal(int(seconds * SR))
    for start, end, amp in spans:
        a, b = int(start * SR), int(end * SR)
        audio[a:b] += amp * rng.standard_normal(b - a)
    return audio.astype(np.float32)


def test_the_cut_is_the_quietest_moment_near_the_middle_and_keeps_pieces_long_enough():
    audio = _bursts((0.2, 2.4, 0.1), (2.7, 5.8, 0.1))  # a gap at 2.4-2.7 s
    halves = SplitOptions(pieces=2)
    (cut,) = cuts(audio, halves)
    assert 2.4 * SR <= cut <= 2.7 * SR
    # Quieter still near the start, but outside the search window: the cut stays near the middle.
    near_start = _bursts((0.0, 0.5, 0.1), (0.6, 2.4, 0.1), (2.7, 6.0, 0.1))
    (cut,) = cuts(near_start, halves)
    assert 2.4 * SR <= cut <= 2.7 * SR
    three = cuts(_bursts((0.0, 1.8, 0.1), (2.0, 3.9, 0.1), (4.1, 6.0, 0.1)), SplitOptions())  # 3 pieces
    assert len(three) == 2 and 1.8 * SR <= three[0] <= 2.0 * SR and 3.9 * SR <= three[1] <= 4.1 * SR
    # Too short for two pieces of min_piece_s: no cut.
    assert cuts(_bursts(seconds=1.5), SplitOptions()) == []


def test_sparse_is_few_tokens_for_a_long_enough_utterance():
    o = SplitOptions(below_tokens_per_s=1.2, min_s=3.0)
    assert sparse(4, 5 * SR, o)  # "The cabab" over 5 s
    assert not sparse(15, 5 * SR, o)
    assert not sparse(1, int(2.9 * SR), o)  # short: a word in 2.9 s is a short answer, not an early end
    with pytest.raises(ValueError, match="pieces must be in 2..8"):
        SplitOptions(pieces=1)
    with pytest.raises(ValueError, match="min_gain must be >= 1"):
        SplitOptions(min_gain=0.5)
    with pytest.raises(ValueError, match="must be > 0"):
        SplitOptions(below_tokens_per_s=0)


@pytest.fixture(scope="module")
def stages(default_pack):
    return load_stages(default_pack, StageOptions(precision="int8"))


@pytest.mark.slow
def test_a_decode_that_ends_early_in_babble_is_decoded_again_in_pieces(stages):
    """en_fleurs_1728 in the noisy eval's 10 dB babble, the utterance the loop ended (2.30-7.30 s): Whisper detects
    Vietnamese (probability 0.19) and says "The" for a 5-s sentence; its pieces are English and say most of it
    (in two: "the Cabbage Juice ... depending on how acidic. Basic alkaline, the chemical is.")."""
    from edge_rt.measure import noise_eval
    from edge_rt.measure.noise import NoiseOptions, noisy_mixes

    opts = noise_eval.NoiseEvalOptions(noise=NoiseOptions(kinds=("babble",), snrs_db=(10.0,)),
                                       clips=("en_fleurs_1728",))
    clips, pool = noise_eval.noise_clips(opts)
    (mix,) = [m for m in noisy_mixes({c["id"]: pool[c["id"]] for c in clips}, pool, opts.noise)]
    on = LoopOptions(target="pt", partials=False)
    audio = level(mix.audio[int(2.304 * SR):int(7.296 * SR)], on)
    whole = recognize(stages, dataclasses.replace(on, split=None), audio, len(audio), CaptureClock())
    split = recognize(stages, on, audio, len(audio), CaptureClock())
    said = normalize(split.text).split()
    # the early end (not vacuous): too few tokens for 5 s, and none of the sentence's later words ("The" on AVX2
    # builds; "The Cabest Juice Ch" on a VNNI build with the Whisper decoder's uint8 twin, 2026-12-05)
    assert sparse(_tokens(stages.asr, whole.text), len(audio), on.split), whole  # as recognize() counts them
    assert not {"depending", "chemical"} & set(normalize(whole.text or whole.translation).split()), whole
    assert split.lang == "en" and len(said) >= 8 and {"depending", "chemical"} <= set(said), split
    assert split.translation  # translated into Portuguese as an English utterance


@pytest.mark.slow
def test_pieces_that_say_no_more_than_the_whole_are_not_taken(stages, speech_dir):
    """Clean JFK with a limit no transcript meets: every utterance is cut, and the pieces (the same words, or fewer
    where a cut splits a word) never hold min_gain times the whole's tokens, so the whole's text stands."""
    cut_always = LoopOptions(target="pt", split=SplitOptions(below_tokens_per_s=100.0))
    audio = level(read_audio(speech_dir / "en_jfk.wav"), cut_always)
    assert sparse(len(stages.asr.tokenizer.encode(" And so my fellow Americans")), len(audio), cut_always.split)
    off = recognize(stages, dataclasses.replace(cut_always, split=None), audio, len(audio), CaptureClock())
    kept = recognize(stages, cut_always, audio, len(audio), CaptureClock())
    assert kept.text == off.text and "country" in normalize(kept.text), (off.text, kept.text)
