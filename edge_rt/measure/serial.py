"""The serial baseline: the loop's own engines run one after the other on the whole utterance.

What a user would build from the same parts without the loop's overlap: wait
for the loop's hangover after the end of speech (the same end-of-speech rule),
then one Whisper pass over the whole utterance (the smallest window that holds
it, language detection choosing transcribe or translate as the loop does), the
translation, and the first synthesized chunk (the first clause, as the loop
speaks it). Same engines, same precision (INT8 where the pack kept it), same
automatic gain. Its turn latency is the hangover plus that compute plus the
near-silence that chunk starts with: a pipeline that plays every sample makes
its listener wait through it, where the loop starts at the first sound
(loop/onset.py) and is timed to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from edge_rt.loop.onset import first_sound
from edge_rt.loop.options import LoopOptions
from edge_rt.loop.recognize import asr_task, level

__all__ = ["SerialTurn", "lead_ms", "serial_turn", "time_vad"]


@dataclass(frozen=True)
class SerialTurn:
    """One turn of a stage-after-stage pipeline (this one's, or the package stack's in peer.py)."""

    wait_ms: float  # end-of-speech wait (the loop's hangover)
    asr_ms: float
    mt_ms: float  # 0 when the route has no MT step (Whisper translated, or already in the target language)
    tts_ms: float  # first chunk; 0 when nothing was recognised
    text: str  # what is spoken ("" when nothing was recognised)
    heard: str = ""  # what Whisper wrote (the MT input)
    mt_pair: tuple[str, str] | None = None  # the MT step of the route, if any
    # The first chunk's samples before its first sound (over -60 dBFS, loop/onset.py), played as they come: Piper
    # starts a sentence with ~36 ms of near-silence at the median, espeak-ng with ~none.
    lead_ms: float = 0.0

    @property
    def compute_ms(self) -> float:
        return self.asr_ms + self.mt_ms + self.tts_ms

    @property
    def latency_ms(self) -> float:
        """End of speech -> the first sound of the reply: the wait, the compute and the first chunk's lead."""
        return self.wait_ms + self.compute_ms + self.lead_ms


def lead_ms(samples, rate: int) -> float:
    """Milliseconds of ``samples`` (float, [-1, 1], at ``rate`` Hz) before their first sound (loop/onset.py)."""
    return first_sound(samples) * 1000 / rate


def serial_turn(stages, audio: np.ndarray, end: int, options: LoopOptions, settle_s: float = 0.0) -> SerialTurn:
    """One serial turn over ``audio[:end]`` (float32, 16 kHz) into ``options.target``.

    ``settle_s``: rest before each stage, not counted (the perf check times each stage alone: ONNX
    Runtime threads still spinning after one stage would otherwise slow the next on a 2-core machine).
    """
    target = options.target
    speech = level(audio[:end], options)
    time.sleep(settle_s)
    t0 = time.perf_counter()
    heard = stages.asr.transcribe(speech, language=options.source, task=asr_task(stages, target))
    t1 = time.perf_counter()
    text = source = heard.text.strip()
    pair = stages.route(heard.language, target).mt_pair if text else None
    time.sleep(settle_s)
    t1b = time.perf_counter()
    if pair:
        text = stages.mt.translate(text, *pair)
    t2 = time.perf_counter()
    time.sleep(settle_s)
    t2b = time.perf_counter()
    first = next(iter(stages.tts.clauses(text, target)), None) if any(c.isalnum() for c in text) else None
    t3 = time.perf_counter()
    return SerialTurn(float(options.endpoint.hangover_ms), (t1 - t0) * 1000, (t2 - t1b) * 1000,
                      (t3 - t2b) * 1000, text, source, tuple(pair) if pair else None,
                      lead_ms(first.samples, first.sample_rate) if first is not None else 0.0)


def time_vad(vad, audio: np.ndarray) -> float:
    """Milliseconds the VAD takes over ``audio`` (hop by hop, as the loop runs it)."""
    t0 = time.perf_counter()
    vad.probabilities(audio)
    return (time.perf_counter() - t0) * 1000
