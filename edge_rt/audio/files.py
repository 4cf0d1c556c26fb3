"""Audio files at the edge: read anything soundfile reads, resample with soxr, write WAV atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_rt.atomic import atomic_write
from edge_rt.errors import AudioInputError
from edge_rt.units import SAMPLE_RATE


def to_mono(samples: np.ndarray) -> np.ndarray:
    """Average the channels of [n, channels] audio; [n] passes through."""
    return samples.mean(axis=1) if samples.ndim == 2 else samples


def resample(samples: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """Resample float32 mono audio with soxr (high quality); a no-op at the target rate."""
    if rate == target:
        return samples.astype(np.float32, copy=False)
    import soxr

    return soxr.resample(samples.astype(np.float32, copy=False), rate, target, quality="HQ").astype(np.float32)


def resampler(rate: int, target: int):
    """A soxr stream from ``rate`` to ``target`` Hz for consecutive chunks of one signal:
    ``.resample_chunk(x, last=...)`` (chunks resampled one by one would each get filter edges)."""
    import soxr

    return soxr.ResampleStream(rate, target, 1, dtype="float32", quality="HQ")


def read_audio(path: str | Path, rate: int = SAMPLE_RATE) -> np.ndarray:
    """Decode an audio file to float32 mono at ``rate`` Hz.

    Any format and channel count soundfile reads; channels are averaged and the
    rate converted with soxr. Raises :class:`AudioInputError` naming the file
    and the problem when it is missing, empty, or cannot be decoded.
    """
    import soundfile as sf

    path = Path(path)
    if not path.exists():
        raise AudioInputError(f"audio file {path} does not exist; check the path")
    if path.is_dir():
        raise AudioInputError(f"{path} is a directory, not an audio file")
    if path.stat().st_size == 0:
        raise AudioInputError(f"audio file {path} is empty (0 bytes)")
    try:
        data, file_rate = sf.read(str(path), dtype="float32", always_2d=False)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise AudioInputError(
            f"cannot decode {path}: {e}. The file is corrupt, truncated or not audio; "
            f"supported formats: WAV, FLAC, OGG/Opus, MP3 and the others libsndfile reads"
        ) from e
    if data.size == 0:
        raise AudioInputError(f"audio file {path} holds no samples")
    mono = to_mono(np.asarray(data, dtype=np.float32))
    if not np.all(np.isfinite(mono)):
        raise AudioInputError(f"audio file {path} holds NaN or infinite samples")
    return resample(mono, int(file_rate), rate)


def write_audio(path: str | Path, samples: np.ndarray, rate: int) -> Path:
    """Write float32 mono samples as 16-bit PCM WAV, atomically (no half-written file)."""
    import soundfile as sf

    path = Path(path)
    if path.parent and not path.parent.exists():
        raise AudioInputError(f"cannot write {path}: folder {path.parent} does not exist")
    clipped = np.clip(samples, -1.0, 1.0)
    return atomic_write(path, lambda tmp: sf.write(str(tmp), clipped, rate, subtype="PCM_16", format="WAV"))
