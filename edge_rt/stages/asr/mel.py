"""Whisper's log-mel front end in numpy, and the cutting of it into encoder windows.

Numerically the same as faster-whisper's ``FeatureExtractor`` (80 Slaney mel bins,
25 ms Hann window, 10 ms hop, log10, 8-decade dynamic range, ``(x + 4) / 4``), so
our encoder sees the same input as the reference implementation.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from edge_rt.errors import AudioInputError
from edge_rt.units import HOP_LENGTH, N_FFT, N_MELS, SAMPLE_RATE

N_FREQS = N_FFT // 2 + 1  # 201 rFFT bins
TAIL_PAD = HOP_LENGTH  # samples of zeros appended before the STFT (faster-whisper's ``padding=160``)
LOG_FLOOR = 1e-10  # power floor before log10
DYNAMIC_RANGE = 8.0  # decades kept below the loudest bin
BLOCK_FRAMES = 500  # STFT frames transformed at a time (5 s of audio)

# Slaney mel scale: linear below 1 kHz, logarithmic above.
_F_SP = 200.0 / 3  # Hz per mel in the linear part
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP  # 15 mel
_LOGSTEP = np.log(6.4) / 27.0  # ln(Hz ratio) per mel in the log part


def _hz_to_mel(f: float) -> float:
    return f / _F_SP if f < _MIN_LOG_HZ else _MIN_LOG_MEL + np.log(f / _MIN_LOG_HZ) / _LOGSTEP


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    hz = _F_SP * m
    log = m >= _MIN_LOG_MEL
    hz[log] = _MIN_LOG_HZ * np.exp(_LOGSTEP * (m[log] - _MIN_LOG_MEL))
    return hz


@lru_cache(maxsize=4)
def mel_filters(n_mels: int = N_MELS, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney-normalised triangular mel filterbank, float32 [n_mels, n_fft // 2 + 1], 0 Hz..Nyquist."""
    fft_hz = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    mel_hz = _mel_to_hz(np.linspace(0.0, _hz_to_mel(sample_rate / 2), n_mels + 2))
    ramps = mel_hz[:, None] - fft_hz[None, :]
    fdiff = np.diff(mel_hz)
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_hz[2 : n_mels + 2] - mel_hz[:n_mels]))[:, None]  # constant energy per band
    weights = weights.astype(np.float32)
    weights.flags.writeable = False
    return weights


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    w = np.hanning(N_FFT + 1)[:-1].astype(np.float32)  # periodic Hann
    w.flags.writeable = False
    return w


def log_mel(audio: np.ndarray, *, tail_pad: int = TAIL_PAD) -> np.ndarray:
    """Whisper log-mel spectrogram of a whole recording.

    Args:
        audio: float32 [n] mono samples at 16 kHz, nominally in [-1, 1].
        tail_pad: zeros appended before the STFT. The default (160) is faster-whisper's; 0 gives
            Hugging Face's ``WhisperFeatureExtractor`` framing (exactly ``n // 160`` frames, the
            end reflect-padded), which Smart Turn (edge_rt/stages/turn.py) was trained on.

    Returns:
        float32 [80, (n + tail_pad) // 160]; frame ``t`` covers samples ``t*160 +- 200``. With the
        default ``tail_pad`` the last frame only sees the zero padding; :func:`content_frames`
        excludes it. Values are normalised over the whole recording (``max - 8`` floor), as
        faster-whisper does.
    """
    audio = np.asarray(audio)
    if audio.ndim != 1 or audio.dtype.kind != "f":
        raise AudioInputError(
            f"log_mel needs float mono audio of shape [n]; got {audio.dtype} {audio.shape} "
            f"(downmix and convert to float32 at {SAMPLE_RATE} Hz first)"
        )
    x = np.pad(audio.astype(np.float32, copy=False), (0, tail_pad))
    x = np.pad(x, (N_FFT // 2, N_FFT // 2), mode="reflect")  # centred frames
    n_frames = 1 + (len(x) - N_FFT) // HOP_LENGTH - 1  # the final STFT frame is dropped, as in Whisper
    frames = np.lib.stride_tricks.as_strided(x, (n_frames, N_FFT), (HOP_LENGTH * x.strides[0], x.strides[0]))
    # The power spectrum [201, frames] (column-major, as the transposed FFT output it was), filled BLOCK_FRAMES
    # frames at a time: the FFT's complex128 output and the windowed frames of a 28-s utterance were ~20 MB
    # of temporaries at once, which stayed in the process's heap. Each frame's arithmetic is unchanged, and
    # the mel product is one product over all frames as before: the same floats, bit for bit (tests).
    power = np.empty((n_frames, N_FREQS), np.float32).T
    for b in range(0, n_frames, BLOCK_FRAMES):
        spec = np.fft.rfft(frames[b : b + BLOCK_FRAMES] * _window(), n=N_FFT, axis=-1).astype(np.complex64).T
        np.square(np.abs(spec), out=power[:, b : b + BLOCK_FRAMES])
    mel = mel_filters() @ power
    log = np.log10(np.clip(mel, LOG_FLOOR, None))
    log = np.maximum(log, log.max() - DYNAMIC_RANGE)
    return ((log + 4.0) / 4.0).astype(np.float32, copy=False)


def content_frames(mel: np.ndarray) -> int:
    """Frames of ``mel`` that hold audio (all but the trailing padding frame)."""
    return max(mel.shape[-1] - 1, 0)


def window(mel: np.ndarray, start: int, frames: int, out: np.ndarray | None = None) -> np.ndarray:
    """One encoder input: ``mel[:, start : start + frames]`` zero-padded to ``frames``.

    Args:
        mel: float32 [80, T] from :func:`log_mel`.
        start: first frame (a multiple of 3000 when cutting long audio into 30-s windows).
        frames: the bucket size in frames (``units.bucket_frames(seconds)``).
        out: optional float32 [1, 80, frames] buffer to fill (avoids an allocation per call).

    Returns:
        float32 [1, 80, frames]. Padding is 0 in the normalised log-mel domain, like
        faster-whisper's ``pad_or_trim`` of the feature matrix.
    """
    if out is None:
        out = np.empty((1, mel.shape[0], frames), np.float32)
    n = max(0, min(frames, content_frames(mel) - start))
    out[0, :, :n] = mel[:, start : start + n]
    out[0, :, n:] = 0.0
    return out
