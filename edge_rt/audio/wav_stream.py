"""A WAV file that grows while it is written and is always readable (crash, power loss).

Mono 16-bit PCM. The header's sizes are rewritten at every :meth:`flush`,
followed by ``fsync``; a file cut short by a crash is still read to its last
whole sample by :func:`read_wav`, which trusts the file size over a stale header.
Samples are float32 in [-1, 1] scaled by 32768 (the inverse of how libsndfile
reads PCM16), so audio read from a PCM16 file round-trips bit-exactly.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from edge_rt.errors import AudioInputError

__all__ = ["StreamingWav", "read_wav"]

HEADER_BYTES = 44
SAMPLE_BYTES = 2  # PCM16
SCALE = 32768.0


def _header(rate: int, data_bytes: int) -> bytes:
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * SAMPLE_BYTES, SAMPLE_BYTES, 16)
            + b"data" + struct.pack("<I", data_bytes))


def to_pcm16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.round(samples * SCALE), -32768, 32767).astype("<i2")


class StreamingWav:
    """Append-only mono PCM16 WAV; one writer thread."""

    def __init__(self, path: str | Path, rate: int):
        self.path = Path(path)
        self.rate = rate
        self.frames = 0
        self._f = open(self.path, "wb")
        self._f.write(_header(rate, 0))
        self._dirty = True

    def append(self, samples: np.ndarray) -> None:
        self._f.write(to_pcm16(samples).tobytes())
        self.frames += len(samples)
        self._dirty = True

    def pad_to(self, frame: int) -> None:
        """Append silence up to frame index ``frame`` (keeps the file aligned to the clock)."""
        if frame > self.frames:
            self._f.write(bytes((frame - self.frames) * SAMPLE_BYTES))
            self.frames = frame
            self._dirty = True

    def flush(self) -> None:
        """Make everything appended so far durable and the header correct."""
        if not self._dirty or self._f.closed:
            return
        self._f.flush()
        end = self._f.tell()
        self._f.seek(0)
        self._f.write(_header(self.rate, self.frames * SAMPLE_BYTES))
        self._f.seek(end)
        self._f.flush()
        os.fsync(self._f.fileno())
        self._dirty = False

    def close(self) -> None:
        if not self._f.closed:
            self.flush()
            self._f.close()


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a :class:`StreamingWav` file (also one cut short); returns float32 samples and the rate."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise AudioInputError(f"cannot read recorded audio {path}: {e}") from e
    if len(raw) < HEADER_BYTES or raw[:4] != b"RIFF" or raw[8:12] != b"WAVE" or raw[36:40] != b"data":
        raise AudioInputError(f"{path} is not a recording written by edge-rt (no 44-byte PCM16 WAV header)")
    rate = struct.unpack("<I", raw[24:28])[0]
    n = (len(raw) - HEADER_BYTES) // SAMPLE_BYTES  # the file size wins over a header a crash left stale
    data = np.frombuffer(raw, dtype="<i2", count=n, offset=HEADER_BYTES)
    return (data.astype(np.float32) / SCALE), rate
