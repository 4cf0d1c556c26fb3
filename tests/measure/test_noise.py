"""Noisy mixes of the real clips: SNR, reproducibility, noise-only padding, the noise kinds themselves."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.measure.noise import (NOISE_KINDS, NoiseOptions, make_noise, measured_snr_db, mix_at_snr, noisy_mixes,
                                   speech_frames)
from edge_rt.units import SAMPLE_RATE, VAD_FRAME


@pytest.fixture(scope="module")
def pool(speech_dir, speech_manifest) -> dict[str, np.ndarray]:
    ids = ["en_jfk", "en_librispeech_1089-134686-0001", "de_fleurs_sinnvoll", "fr_fleurs_test_005",
           "zh_aishell1_BAC009S0764W0121", "en_fleurs_luna"]
    return {m["id"]: read_audio(speech_dir / m["audio"]) for m in speech_manifest if m["id"] in ids}


def test_every_kind_hits_the_requested_snr_within_a_tenth_of_a_db(pool):
    clip = {"en_jfk": pool["en_jfk"]}
    mixes = list(noisy_mixes(clip, pool, NoiseOptions(snrs_db=(0.0, 5.0, 10.0, 20.0))))
    assert [(m.kind, m.snr_db) for m in mixes] == [(k, s) for k in NOISE_KINDS for s in (0.0, 5.0, 10.0, 20.0)]
    scaled = 0
    for m in mixes:
        assert m.audio.dtype == np.float32 and m.audio.shape == m.clean.shape
        assert np.max(np.abs(m.audio)) <= 0.99 + 1e-6
        speech = m.gain * m.clean.astype(np.float64)
        got = measured_snr_db(speech, m.audio - speech)
        scaled += m.gain < 1
        assert abs(got - m.snr_db) < 0.1, (m.id, got)
    assert scaled  # at 0 dB the JFK mixes pass the peak and are scaled: that path is covered too


def test_mix_at_snr_exact_and_scaled_paths():
    rng = np.random.default_rng(0)
    clean = np.zeros(SAMPLE_RATE, np.float32)
    clean[4000:12000] = 0.1 * np.sin(2 * np.pi * 220 * np.arange(8000) / SAMPLE_RATE)
    noise = rng.standard_normal(SAMPLE_RATE)
    for snr in (-5.0, 0.0, 12.5, 30.0):
        mixed, gain = mix_at_snr(clean, noise, snr)
        assert gain == 1.0
        assert abs(measured_snr_db(clean, mixed - clean) - snr) < 0.1
    loud, gain = mix_at_snr(clean * 9, noise, -5.0)  # peaks far above 1 before scaling
    assert gain < 0.5 and np.max(np.abs(loud)) <= 0.99 + 1e-6
    speech = gain * 9 * clean.astype(np.float64)
    assert abs(measured_snr_db(speech, loud - speech) + 5.0) < 0.1
    with pytest.raises(ValueError, match="same length"):
        mix_at_snr(clean, noise[:-1], 5.0)
    with pytest.raises(ValueError, match="no speech frame"):
        measured_snr_db(np.zeros(1024), noise[:1024])


def test_speech_frames_are_the_loud_frames():
    x = np.zeros(10 * VAD_FRAME, np.float32)
    x[2 * VAD_FRAME : 4 * VAD_FRAME] = 0.5
    x[6 * VAD_FRAME : 7 * VAD_FRAME] = 0.5 * 10 ** (-40 / 20)  # 40 dB under: not speech
    assert speech_frames(x).tolist() == [False, False, True, True, False, False, False, False, False, False]


def test_same_seed_same_bytes_other_seed_other_noise(pool):
    clip = {"en_librispeech_1089-134686-0001": pool["en_librispeech_1089-134686-0001"]}
    opts = NoiseOptions(snrs_db=(5.0,))
    a = [m.audio.tobytes() for m in noisy_mixes(clip, pool, opts)]
    b = [m.audio.tobytes() for m in noisy_mixes(clip, pool, opts)]
    c = [m.audio.tobytes() for m in noisy_mixes(clip, pool, NoiseOptions(snrs_db=(5.0,), seed=opts.seed + 1))]
    assert a == b
    assert all(x != y for x, y in zip(a, c))


def test_noise_alone_before_and_after_the_speech(pool):
    cid = "en_librispeech_1089-134686-0001"
    opts = NoiseOptions(kinds=("pink", "babble"), snrs_db=(10.0,), pad_s=2.0)
    for m in noisy_mixes({cid: pool[cid]}, pool, opts):
        pad = 2 * SAMPLE_RATE
        assert (m.speech_start, m.speech_end) == (pad, pad + len(pool[cid]))
        assert len(m.audio) == len(pool[cid]) + 2 * pad
        np.testing.assert_array_equal(m.clean[m.speech_start : m.speech_end], pool[cid])
        assert not m.clean[: m.speech_start].any() and not m.clean[m.speech_end :].any()
        for stretch in (m.audio[: m.speech_start], m.audio[m.speech_end :]):  # noise alone, at the mix's level
            assert 10 * np.log10(np.mean(stretch.astype(np.float64) ** 2)) > -60


def test_babble_is_other_talkers_never_the_clip_itself():
    t = np.arange(3 * SAMPLE_RATE) / SAMPLE_RATE
    tone = lambda f: (0.3 * np.sin(2 * np.pi * f * t)).astype(np.float32)  # noqa: E731
    pool = {"me": tone(1000), "a": tone(300), "b": tone(500), "c": tone(700), "d": tone(1300)}
    for m in noisy_mixes({"me": pool["me"]}, pool, NoiseOptions(kinds=("babble",), snrs_db=(0.0,), pad_s=0.5)):
        spec = np.abs(np.fft.rfft(m.audio[m.speech_end :]))  # the trailing pad: babble alone
        freqs = np.fft.rfftfreq(len(m.audio) - m.speech_end, 1 / SAMPLE_RATE)
        at = lambda f: spec[np.argmin(np.abs(freqs - f))]  # noqa: E731
        present = [f for f in (300, 500, 700, 1300) if at(f) > 0.1 * spec.max()]
        assert 3 <= len(present) <= 4, present
        assert at(1000) < 0.01 * spec.max()
    with pytest.raises(ValueError, match="at least 3 other clips"):
        make_noise("babble", np.random.default_rng(0), 100, [pool["a"]])


@pytest.mark.parametrize("kind, slope", [("pink", -1.0), ("brown", -2.0)])
def test_colored_noise_has_its_spectral_slope_and_nothing_below_20_hz(kind, slope):
    x = make_noise(kind, np.random.default_rng(1), 8 * SAMPLE_RATE)
    assert abs(np.sqrt(np.mean(x**2)) - 1) < 1e-6
    p = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(len(x), 1 / SAMPLE_RATE)
    assert p[(f > 0) & (f < 19)].sum() < 1e-12 * p.sum()
    band = (f > 50) & (f < 5000)
    fit = np.polyfit(np.log10(f[band]), np.log10(p[band]), 1)[0]
    assert abs(fit - slope) < 0.1, fit


def test_options_name_what_is_wrong():
    with pytest.raises(ValueError, match="noise kinds are babble"):
        NoiseOptions(kinds=("traffic",))
    with pytest.raises(ValueError, match="SNRs"):
        NoiseOptions(snrs_db=(100.0,))
    with pytest.raises(ValueError, match="unknown noise kind"):
        make_noise("white", np.random.default_rng(0), 10)
