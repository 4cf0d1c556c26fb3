"""Silero VAD: speech probability for each 32 ms frame, streaming.

The graph is Silero's If-free opset-18 export (TensorRT parses it). Like the
upstream wrapper, every call sees the 64 samples that preceded the frame, and
the recurrent state is carried from call to call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from edge_rt.backends.base import Engine
from edge_rt.pack import BuiltPack

if TYPE_CHECKING:
    from edge_rt.backends.factory import EngineFactory
from edge_rt.units import SAMPLE_RATE, VAD_CONTEXT, VAD_FRAME

STATE_SHAPE = (2, 1, 128)  # Silero's LSTM state: (h, c) x batch x 128


@dataclass(frozen=True)
class VadOptions:
    """How the VAD runs."""

    precision: str = "fp32"  # "fp32" | "int8" (falls back to fp32 when the pack has no int8 twin)
    threads: int = 1  # the VAD is tiny; one thread is fastest


class SileroVad:
    """Streaming Silero VAD over 512-sample frames at 16 kHz.

    Buffers are allocated once; :meth:`__call__` copies the frame into them and
    returns the speech probability in [0, 1].
    """

    def __init__(self, engine: Engine):
        self._engine = engine
        self._input = np.zeros((1, VAD_CONTEXT + VAD_FRAME), dtype=np.float32)
        self._state = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._prob = np.zeros((1, 1), dtype=np.float32)
        self._state_out = np.zeros(STATE_SHAPE, dtype=np.float32)
        # Bound once: each frame copies in and runs, allocating nothing. The backend carries
        # stateN into state itself (on a GPU it never leaves the device); only the
        # probability is read on the host.
        self._step = engine.bind({"input": self._input, "state": self._state, "sr": self._sr},
                                 {"output": self._prob, "stateN": self._state_out},
                                 device_resident={"state": "stateN"}, host_outputs=("output",))

    @classmethod
    def from_pack(cls, pack: BuiltPack, options: VadOptions = VadOptions(), *, engines: EngineFactory) -> "SileroVad":
        """The pack's VAD on the engines ``engines`` builds (see :mod:`edge_rt.backends.factory`)."""
        return cls(engines.load("vad", "silero", precision=options.precision, threads=options.threads))

    def reset(self) -> None:
        """Forget the recurrent state and context (start of a new stream)."""
        self._input[:] = 0.0
        self._step.reset_state()

    def __call__(self, frame: np.ndarray) -> float:
        """Speech probability of one frame of ``VAD_FRAME`` float32 samples at 16 kHz."""
        if frame.shape != (VAD_FRAME,):
            raise ValueError(f"a VAD frame is {VAD_FRAME} samples at {SAMPLE_RATE} Hz, got shape {frame.shape}")
        # The last 64 samples of the previous frame become this frame's context.
        self._input[0, :VAD_CONTEXT] = self._input[0, -VAD_CONTEXT:]
        self._input[0, VAD_CONTEXT:] = frame
        self._step.run()
        return float(self._prob[0, 0])

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """Per-frame speech probabilities of a whole clip (zero-padded to whole frames).

        Args:
            audio: float32 mono at 16 kHz, shape [n].
        Returns:
            float32 [ceil(n / 512)]: frame ``i`` covers samples ``[512 i, 512 (i + 1))``.
        """
        self.reset()
        n_frames = -(-len(audio) // VAD_FRAME)
        padded = np.zeros(n_frames * VAD_FRAME, dtype=np.float32)
        padded[: len(audio)] = audio
        probs = np.empty(n_frames, dtype=np.float32)
        for i in range(n_frames):
            probs[i] = self(padded[i * VAD_FRAME : (i + 1) * VAD_FRAME])
        self.reset()
        return probs
