"""Piper's vocoder a window of latent frames at a time, so speech starts before the sentence is synthesized.

The build splits a Piper voice into its prior (phonemes -> latent ``z [1, channels, frames]``) and its
vocoder (``z`` -> ``hop`` samples per frame; edge_rt/build/export/piper_split.py). The vocoder is
convolutional: a window with ``context`` frames on each side gives the samples of its middle as the
whole sentence gives them (within 1e-6 at 16 frames of context on this project's English voice). So a
sentence streams as:

* the first window, frames ``[0, first_frames + context)``: no left context, exactly as the whole
  sentence starts (the graph pads with zeros there too); its first ``first_frames`` frames are played;
* then windows of ``context + frames + context``, each giving ``frames`` frames;
* a window that runs past the sentence's end is zero-padded; the last samples then differ from the
  whole sentence by ~1e-4 (the decoder's own zero padding at the end acts on its inner layers too).

Two static window shapes, bound once to preallocated buffers (CUDA-graph friendly where a backend
runs the vocoder). Measured here (2 x86 cores, English voice, sentences of 2.7 and 3.8 s): prior 77-133 ms
plus first window 36-50 ms, against 221-331 ms for the whole sentence. The context costs vocoder time: each
later window runs 160 frames to keep 128 (+25 %), spread over the sentence's playback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from edge_rt.backends.base import Engine

__all__ = ["Vocoder", "VocoderOptions"]


@dataclass(frozen=True)
class VocoderOptions:
    """Window sizes of the streaming vocoder, in latent frames (86 a second at 22050 Hz, hop 256)."""

    # Frames played from the first window: 32 = 0.37 s of speech, ready ~35 ms after the prior here;
    # the next window (~60-100 ms) is synthesized while it plays. Not tuned beyond that arithmetic.
    first_frames: int = 32
    frames: int = 128  # frames played from each later window (1.5 s); larger windows waste less on context
    # Context frames on each side of a window: 16 gives the whole sentence's samples within 1e-6
    # (8: 6e-4, audible as nothing but not exact); measured on three sentences of the English voice.
    context: int = 16

    def __post_init__(self):
        if self.first_frames < 1 or self.frames < 1 or self.context < 0:
            raise ValueError(f"VocoderOptions needs first_frames >= 1, frames >= 1, context >= 0, got "
                             f"{self.first_frames}, {self.frames}, {self.context}")


class Vocoder:
    """The vocoder graph (``z [1, channels, frames]`` -> ``output [1, 1, 1, frames * hop]``) in two bound windows.

    Args:
        engine: the vocoder part of a Piper voice.
        channels, hop: latent channels, waveform samples per frame (the manifest's ``stream_channels``,
            ``stream_hop``).
    """

    def __init__(self, engine: Engine, channels: int, hop: int, options: VocoderOptions = VocoderOptions()):
        self._engine = engine
        self.channels, self.hop, self.options = int(channels), int(hop), options
        o = options
        self._first = self._window(o.first_frames + o.context)
        self._next = self._window(o.context + o.frames + o.context)

    def _window(self, frames: int) -> tuple[np.ndarray, np.ndarray, object]:
        z = np.zeros((1, self.channels, frames), np.float32)
        out = np.zeros((1, 1, 1, frames * self.hop), np.float32)
        return z, out, self._engine.bind({"z": z}, {"output": out})

    def whole(self, z: np.ndarray) -> np.ndarray:
        """The sentence's waveform in one run (allocates: for whole sentences, not the live stream)."""
        return self._engine.run({"z": np.ascontiguousarray(z, dtype=np.float32)})["output"].reshape(-1)

    def stream(self, z: np.ndarray) -> Iterator[tuple[np.ndarray, bool]]:
        """``(samples, last)`` window by window over ``z [1, channels, frames]``; each array is the caller's."""
        o, hop = self.options, self.hop
        total = z.shape[-1]
        start, first = 0, True
        while start < total or first:
            buf, out, step = self._first if first else self._next
            lo = 0 if first else start - o.context  # the first window has no left context
            n = min(buf.shape[-1], total - lo)
            buf[..., :n] = z[..., lo:lo + n]
            buf[..., n:] = 0.0
            step.run()
            keep = min(o.first_frames if first else o.frames, total - start)
            skip = start - lo
            start += keep
            first = False
            yield out[0, 0, 0, skip * hop:(skip + keep) * hop].copy(), start >= total
