"""Whole-file speech translation through the real-time loop, as fast as possible.

``edge-rt translate`` and ``edge-rt run`` share one code path: the loop reads a
:class:`FastFileSource` instead of a microphone and writes a
:class:`TimelineSink` (each translation placed where it was produced) instead
of a speaker. This module takes and returns arrays; the CLI does file I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edge_rt.audio.sinks import TimelineSink
from edge_rt.audio.sources import FastFileSource
from edge_rt.loop.endpoint import EndpointOptions
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.loop.options import RedecodeOptions, SplitOptions
from edge_rt.loop.preroll import NoisyPrerollOptions, SoundStartOptions
from edge_rt.loop.stages import Stages
from edge_rt.loop.trace import UtteranceTrace
from edge_rt.loop.turn_policy import TurnOptions
from edge_rt.units import SAMPLE_RATE


@dataclass(frozen=True)
class TranslateOptions:
    target: str  # language to speak: "en" or "pt" with the default pack
    source: str | None = None  # None: Whisper detects the language of each utterance
    languages: tuple[str, ...] | None = None  # as LoopOptions.languages: what detection chooses among
    endpoint: EndpointOptions = field(default_factory=EndpointOptions)
    turn: TurnOptions | None = field(default_factory=TurnOptions)  # as LoopOptions.turn
    beam_size: int = 1  # as LoopOptions.beam_size (1: greedy, the live loop's default)
    # as LoopOptions.redecode: an unsure greedy decode decoded again with a beam (None: greedy only)
    redecode: RedecodeOptions | None = field(default_factory=RedecodeOptions)
    # as LoopOptions.split: a transcript too sparse for its utterance decoded again in pieces (None: never)
    split: SplitOptions | None = field(default_factory=SplitOptions)
    # as LoopOptions.noisy_preroll: an utterance that opens out of noise starts further back (None: never)
    noisy_preroll: NoisyPrerollOptions | None = field(default_factory=NoisyPrerollOptions)
    # as LoopOptions.sound_start: out of a quiet room, a pre-roll never starts inside a sound (None: never)
    sound_start: SoundStartOptions | None = field(default_factory=SoundStartOptions)


@dataclass(frozen=True)
class Utterance:
    start_s: float  # in the input
    end_s: float
    lang: str  # detected (or given) source language
    text: str  # transcript in the source language
    translation: str  # text that was spoken, in the target language
    trace: UtteranceTrace = field(repr=False)

    @classmethod
    def from_trace(cls, tr: UtteranceTrace) -> "Utterance":
        return cls(tr.start_sample / SAMPLE_RATE, tr.end_sample / SAMPLE_RATE, tr.lang, tr.text, tr.translation, tr)

    def as_dict(self) -> dict:
        return {"start_s": round(self.start_s, 3), "end_s": round(self.end_s, 3), "lang": self.lang,
                "text": self.text, "translation": self.translation,
                "trace": {"t_ns": self.trace.t_ns, "turn_latency_ms": self.trace.turn_latency_ms,
                          "stages_ms": self.trace.stages_ms()}}


def translate_audio(stages: Stages, audio: np.ndarray, options: TranslateOptions) -> tuple[list[Utterance], np.ndarray, int]:
    """Translate float32 mono 16 kHz ``audio``; returns utterances, the output track and its rate."""
    source = FastFileSource(audio)
    rate = stages.tts.sample_rate(options.target) if options.target in stages.tts.languages else SAMPLE_RATE
    sink = TimelineSink(rate, now_s=lambda: source.ring.read_index / SAMPLE_RATE)
    loop = Loop(stages, source, sink, LoopOptions(target=options.target, source=options.source,
                                                  languages=options.languages,
                                                  endpoint=options.endpoint, partials=False,
                                                  turn=options.turn, beam_size=options.beam_size,
                                                  redecode=options.redecode, split=options.split,
                                                  noisy_preroll=options.noisy_preroll,
                                                  sound_start=options.sound_start))
    traces = loop.run()
    utts = [Utterance.from_trace(t) for t in traces if t.translation]
    return utts, sink.audio(min_seconds=len(audio) / SAMPLE_RATE), rate
