"""Smart Turn v3.2: the probability that the speaker has finished their turn.

The model (built into the pack by edge_rt/build/export/smart_turn.py) reads the Whisper
log-mel of the last 8 s of the utterance so far, zero-padded at the front when shorter, the way
Smart Turn's own inference code prepares it: the 8-s waveform is normalised to zero mean and
unit variance, then ``log_mel`` with Hugging Face's framing (no tail padding, 800 frames). The
features come from our own mel front end (edge_rt/stages/asr/mel.py), checked against the
upstream numpy code in tests/stages/test_turn.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from edge_rt.backends.base import Engine
from edge_rt.errors import AudioInputError, PackNotBuiltError
from edge_rt.pack import BuiltPack, build_command
from edge_rt.stages.asr.mel import log_mel
from edge_rt.units import N_MELS, SAMPLE_RATE, bucket_frames

if TYPE_CHECKING:
    from edge_rt.backends.factory import EngineFactory

__all__ = ["SmartTurn", "TurnModelOptions", "WINDOW_S", "WINDOW_SAMPLES", "FRAMES"]

WINDOW_S = 8  # s of audio the model sees (the end of the utterance)
WINDOW_SAMPLES = WINDOW_S * SAMPLE_RATE  # 128000 samples
FRAMES = bucket_frames(WINDOW_S)  # 800 mel frames
NORM_EPS = 1e-7  # variance floor of the waveform normalisation (Hugging Face's WhisperFeatureExtractor)
MODEL = "smart_turn"
INPUT = "input_features"  # the graph's input name (the export checks it; the manifest repeats it)


@dataclass(frozen=True)
class TurnModelOptions:
    """How the end-of-turn model runs."""

    # The model ships as an INT8 Q/DQ graph, recorded under "fp32" (= as shipped); "int8" loads the same file.
    precision: str = "fp32"
    # The loop runs the model on its one worker thread, after the speculation, never beside ASR, and at
    # the first call of a pause the decision waits for it. On this project's 2-core x86 (no VNNI), with
    # numpy's BLAS on one thread (backends/threads.py), a call took 75 ms on one thread and 44-52 ms on two
    # (FACTS.md's ~24 ms was a faster core). On a 2-core Xeon with AVX-VNNI: 27 ms alone, 46-49 ms right after a
    # Whisper decode while the other sessions' threads spun, 36-39 ms when only the decoder's did, 26 ms since every
    # session's threads stop spinning when its run returns (backends/ort.py, SessionOptions.spinning).
    threads: int = 2


class SmartTurn:
    """P(turn complete) of the audio heard so far; one static [1, 80, 800] call.

    The 8-s waveform, the feature input and the output are allocated once and bound to the
    engine; a call copies the audio in, normalises it in place, writes the log-mel into the bound
    input and runs (only ``log_mel``'s own temporaries are allocated per call).
    """

    def __init__(self, engine: Engine, input_name: str = INPUT, output_name: str = "logits"):
        names = (list(engine.input_names), list(engine.output_names))
        if names != ([input_name], [output_name]):
            raise PackNotBuiltError(f"the turn model's engine has inputs/outputs {names}, expected "
                                    f"[{input_name!r}], [{output_name!r}]; rebuild the pack with `--force`")
        self._window = np.zeros(WINDOW_SAMPLES, np.float32)
        self._features = np.zeros((1, N_MELS, FRAMES), np.float32)
        self._prob = np.zeros((1, 1), np.float32)
        self._step = engine.bind({input_name: self._features}, {output_name: self._prob})

    @classmethod
    def from_pack(cls, pack: BuiltPack, options: TurnModelOptions = TurnModelOptions(), *,
                  engines: EngineFactory) -> "SmartTurn":
        """The pack's turn model on the engines ``engines`` builds (see :mod:`edge_rt.backends.factory`).

        Raises:
            PackNotBuiltError: the pack was built before the turn stage existed, or for another window.
        """
        entry = pack.stage("turn")
        if int(entry.get("frames", 0)) != FRAMES or int(entry.get("sample_rate", 0)) != SAMPLE_RATE:
            raise PackNotBuiltError(
                f"model pack '{pack.name}': the turn model reads {entry.get('frames')} frames at "
                f"{entry.get('sample_rate')} Hz, this edge_rt computes {FRAMES} at {SAMPLE_RATE} Hz; rebuild it "
                f"with `{build_command(pack.name)} --force`")
        engine = engines.load("turn", MODEL, precision=options.precision, threads=options.threads)
        return cls(engine, entry.get("input", INPUT), entry.get("output", "logits"))

    def features(self, audio: np.ndarray) -> np.ndarray:
        """Fill and return the bound model input for ``audio`` (a view: copy it to keep it).

        Args:
            audio: float32 [n] mono at 16 kHz, the utterance so far; only the last 8 s are used.
        Returns:
            float32 [1, 80, 800]: log-mel of the normalised, front-zero-padded last 8 s.
        """
        audio = np.asarray(audio)
        if audio.ndim != 1 or audio.dtype.kind != "f":
            raise AudioInputError(f"the turn model needs float mono audio of shape [n] at {SAMPLE_RATE} Hz; "
                                  f"got {audio.dtype} {audio.shape}")
        n = min(len(audio), WINDOW_SAMPLES)
        w = self._window
        w[: WINDOW_SAMPLES - n] = 0.0
        w[WINDOW_SAMPLES - n :] = audio[len(audio) - n :]
        # Normalised in float32 over the whole padded window, as the model's training code does.
        mean, var = w.mean(), w.var()
        w -= mean
        w /= np.sqrt(var + np.float32(NORM_EPS))
        self._features[0] = log_mel(w, tail_pad=0)
        return self._features

    def probability(self, audio: np.ndarray) -> float:
        """P(turn complete) in [0, 1] after ``audio`` (float32 [n], 16 kHz, the utterance so far)."""
        self.features(audio)
        self._step.run()
        return float(self._prob[0, 0])
