"""Whisper log-mel front end: equal to faster-whisper's FeatureExtractor on real speech."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from edge_rt.errors import AudioInputError
from edge_rt.stages.asr import mel
from edge_rt.units import N_FRAMES, N_MELS, SAMPLE_RATE, bucket_frames


@pytest.fixture(scope="module")
def reference():
    from faster_whisper.feature_extractor import FeatureExtractor

    return FeatureExtractor(feature_size=N_MELS)


def test_filterbank_matches_reference(reference):
    fb = mel.mel_filters()
    assert fb.shape == (N_MELS, 201) and fb.dtype == np.float32
    np.testing.assert_array_equal(fb, reference.mel_filters)


@pytest.mark.parametrize("clip", ["en_jfk", "de_fleurs_test_009", "en_fleurs_1728"])
def test_log_mel_matches_faster_whisper(speech_dir, reference, clip):
    audio, sr = sf.read(speech_dir / f"{clip}.wav", dtype="float32")
    assert sr == SAMPLE_RATE
    ours = mel.log_mel(audio)
    assert ours.shape == (N_MELS, len(audio) // 160 + 1) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, reference(audio), rtol=0, atol=1e-6)


def _log_mel_at_once(audio: np.ndarray, tail_pad: int) -> np.ndarray:
    """The front end with every frame's FFT taken at once (as log_mel was before it went block by block)."""
    x = np.pad(np.pad(audio, (0, tail_pad)), (mel.N_FFT // 2, mel.N_FFT // 2), mode="reflect")
    n = 1 + (len(x) - mel.N_FFT) // mel.HOP_LENGTH
    frames = np.lib.stride_tricks.as_strided(x, (n, mel.N_FFT), (mel.HOP_LENGTH * x.strides[0], x.strides[0]))
    spec = np.fft.rfft(frames * mel._window(), n=mel.N_FFT, axis=-1).astype(np.complex64).T
    log = np.log10(np.clip(mel.mel_filters() @ np.abs(spec[:, :-1]) ** 2, mel.LOG_FLOOR, None))
    return ((np.maximum(log, log.max() - mel.DYNAMIC_RANGE) + 4.0) / 4.0).astype(np.float32)


def test_log_mel_block_by_block_is_the_same_as_at_once(speech_dir):
    """The FFT goes BLOCK_FRAMES frames at a time (fewer temporaries for a long utterance): the same floats,
    bit for bit, at a joint decode's 28 s and at lengths around a block's edge, for both framings."""
    audio, _ = sf.read(speech_dir / "de_fleurs_test_009.wav", dtype="float32")
    edge = mel.BLOCK_FRAMES * mel.HOP_LENGTH
    for n in (28 * SAMPLE_RATE, edge - 161, edge - 160, edge, edge + 1, 2 * edge + 7, 400, 3 * SAMPLE_RATE):
        for tail_pad in (mel.TAIL_PAD, 0):
            got, want = mel.log_mel(audio[:n], tail_pad=tail_pad), _log_mel_at_once(audio[:n], tail_pad)
            assert got.shape == want.shape and got.dtype == np.float32
            np.testing.assert_array_equal(got, want, err_msg=f"{n} samples, tail_pad {tail_pad}")


def test_silence_and_tiny_inputs(reference):
    for n in (0, 1, 399, SAMPLE_RATE):
        z = np.zeros(n, np.float32)
        np.testing.assert_array_equal(mel.log_mel(z), reference(z))
    silent = mel.log_mel(np.zeros(SAMPLE_RATE, np.float32))
    np.testing.assert_allclose(silent, -1.5, atol=1e-6)  # the floor: (log10(1e-10) + 4) / 4


def test_window_pads_with_zeros_like_pad_or_trim():
    from faster_whisper.audio import pad_or_trim

    m = np.random.default_rng(0).standard_normal((N_MELS, 1101)).astype(np.float32)
    content = mel.content_frames(m)
    assert content == 1100
    w30 = mel.window(m, 0, N_FRAMES)
    np.testing.assert_array_equal(w30[0], pad_or_trim(m[:, :content]))
    w15 = mel.window(m, 0, bucket_frames(15))
    assert w15.shape == (1, N_MELS, 1500)
    np.testing.assert_array_equal(w15[0, :, :1100], m[:, :1100])
    assert not w15[0, :, 1100:].any()


def test_window_reuses_buffer_and_slices_later_windows():
    m = np.arange(N_MELS * 4340, dtype=np.float32).reshape(N_MELS, 4340)
    buf = np.full((1, N_MELS, N_FRAMES), 7.0, np.float32)
    out = mel.window(m, N_FRAMES, N_FRAMES, out=buf)
    assert out is buf
    np.testing.assert_array_equal(out[0, :, :1339], m[:, 3000:4339])
    assert not out[0, :, 1339:].any()


def test_rejects_non_float_or_stereo_audio():
    with pytest.raises(AudioInputError, match="mono"):
        mel.log_mel(np.zeros((2, 100), np.float32))
    with pytest.raises(AudioInputError, match="float"):
        mel.log_mel(np.zeros(100, np.int16))
