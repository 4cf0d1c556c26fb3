"""Reading and writing audio files: any rate/channels in, named errors for bad files."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from edge_rt.audio.files import read_audio, write_audio
from edge_rt.errors import AudioInputError


def test_real_clip_reads_as_16k_float(speech_dir):
    audio = read_audio(speech_dir / "en_jfk.wav")
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert abs(len(audio) / 16000 - 11.0) < 0.01


def test_stereo_44k_is_downmixed_and_resampled(tmp_path, speech_dir):
    mono = read_audio(speech_dir / "en_librispeech_1089-134691-0000.wav")
    import soxr

    up = soxr.resample(mono, 16000, 44100)
    path = tmp_path / "stereo.flac"
    sf.write(path, np.stack([up, up], axis=1), 44100)
    back = read_audio(path)
    assert abs(len(back) - len(mono)) <= 2
    n = min(len(back), len(mono))
    assert np.corrcoef(back[:n], mono[:n])[0, 1] > 0.99


@pytest.mark.parametrize("content,match", [
    (None, "does not exist"),
    (b"", "is empty"),
    (b"RIFF\x00\x00\x00\x00WAVEfmt garbage", "cannot decode"),
    (b"hello, I am not audio at all" * 10, "cannot decode"),
])
def test_bad_files_are_named(tmp_path, content, match):
    path = tmp_path / "in.wav"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(AudioInputError, match=match):
        read_audio(path)


def test_truncated_wav_is_named_or_read_partially(tmp_path, speech_dir):
    data = (speech_dir / "en_jfk.wav").read_bytes()
    path = tmp_path / "cut.wav"
    path.write_bytes(data[:30])  # header cut in the middle
    with pytest.raises(AudioInputError):
        read_audio(path)


def test_write_is_atomic_and_16bit(tmp_path):
    out = write_audio(tmp_path / "o.wav", np.full(22050, 0.5, np.float32), 22050)
    info = sf.info(out)
    assert (info.samplerate, info.subtype, info.frames) == (22050, "PCM_16", 22050)
    assert not list(tmp_path.glob("*.part"))
    with pytest.raises(AudioInputError, match="does not exist"):
        write_audio(tmp_path / "nope" / "o.wav", np.zeros(10, np.float32), 16000)


def test_a_resampler_stream_gives_the_whole_signal_resampled_at_once():
    """Streamed TTS windows are resampled through one soxr stream per clause: no filter edges at the joins."""
    import soxr

    from edge_rt.audio.files import resampler

    rng = np.random.default_rng(1)
    t = np.arange(22050) / 22050
    signal = (0.5 * np.sin(2 * np.pi * 220 * t) + 0.01 * rng.normal(size=t.size)).astype(np.float32)
    whole = soxr.resample(signal, 22050, 48000, quality="HQ")
    stream = resampler(22050, 48000)
    cuts = [0, 8192, 8192 + 3000, 16000, signal.size]
    parts = [stream.resample_chunk(signal[a:b], last=b == signal.size) for a, b in zip(cuts, cuts[1:])]
    joined = np.concatenate(parts)
    assert joined.shape == whole.shape
    assert np.abs(joined - whole).max() < 1e-4
    # each window resampled on its own has edges at every join
    alone = np.concatenate([soxr.resample(signal[a:b], 22050, 48000, quality="HQ") for a, b in zip(cuts, cuts[1:])])
    assert np.abs(alone[: whole.size] - whole[: alone.size]).max() > 1e-2
