"""Whole-file speech translation: VAD segments → ASR → MT → TTS → one output track.

This is the offline path behind ``edge-rt translate``; it takes and returns
arrays, the CLI does the file I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from edge_rt.pack import BuiltPack
from edge_rt.route import Route, plan_route
from edge_rt.stages.segment import SegmentOptions, speech_segments
from edge_rt.units import SAMPLE_RATE

GAP_S = 0.25  # silence kept between two translated utterances in the output


@dataclass(frozen=True)
class TranslateOptions:
    target: str  # language to speak: "en" or "pt" with the default pack
    source: str | None = None  # None: Whisper detects the language of each utterance
    precision: str = "fp32"  # "fp32" | "int8"
    threads: int = 2
    segments: SegmentOptions = field(default_factory=SegmentOptions)


@dataclass(frozen=True)
class Utterance:
    start_s: float  # in the input
    end_s: float
    lang: str  # detected (or given) source language
    text: str  # transcript in the source language
    translation: str  # text that was spoken, in the target language
    route: str  # stages it took, e.g. "asr:transcribe → mt:en-pt → tts:pt"

    def as_dict(self) -> dict:
        return {"start_s": round(self.start_s, 3), "end_s": round(self.end_s, 3), "lang": self.lang,
                "text": self.text, "translation": self.translation, "route": self.route}


class FileTranslator:
    """Owns the four stages of one pack."""

    def __init__(self, pack: BuiltPack, options: TranslateOptions):
        from edge_rt.stages.asr import Asr, AsrOptions
        from edge_rt.stages.mt import MtOptions, Translator
        from edge_rt.stages.tts import Tts, TtsOptions
        from edge_rt.stages.vad import SileroVad, VadOptions

        self.options = options
        self.vad = SileroVad.from_pack(pack, VadOptions(precision=options.precision))
        self.asr = Asr.from_pack(pack, AsrOptions(precision=options.precision, threads=options.threads))
        self.mt = Translator.from_pack(pack, MtOptions(precision=options.precision))
        self.tts = Tts.from_pack(pack, TtsOptions(precision=options.precision, threads=options.threads))
        # Fail before any audio is processed when the request cannot be served.
        if options.source is not None:
            self.route_for(options.source)
        else:
            self.route_for("en" if "en" in self.asr.languages else next(iter(self.asr.languages)))

    def route_for(self, source: str) -> Route:
        return plan_route(
            source,
            self.options.target,
            asr_languages=self.asr.languages,
            mt_pairs=self.mt.pairs,
            tts_languages=self.tts.languages,
            asr_can_translate=self.asr.multilingual,
        )

    @property
    def output_rate(self) -> int:
        return self.tts.sample_rate(self.options.target)

    def utterances(self, audio: np.ndarray) -> Iterator[tuple[Utterance, np.ndarray]]:
        """Translate each speech segment of ``audio`` (float32 mono 16 kHz); yields text and speech."""
        probs = self.vad.probabilities(audio)
        for seg in speech_segments(probs, len(audio), self.options.segments):
            clip = audio[seg.start : seg.end]
            first = self.asr.transcribe(clip, language=self.options.source, task="transcribe")
            if not first.text.strip():
                continue  # judged silence/noise by the ASR guards
            route = self.route_for(first.language)
            text = first.text.strip()
            if route.asr_task == "translate":
                text = self.asr.transcribe(clip, language=first.language, task="translate").text.strip()
            if route.mt_pair:
                text = self.mt.translate(text, *route.mt_pair)
            speech = self.tts.synthesize(text, route.target).samples if text else np.zeros(0, np.float32)
            yield Utterance(seg.start_s, seg.end_s, first.language, first.text.strip(), text, route.stages), speech

    def translate(self, audio: np.ndarray) -> tuple[list[Utterance], np.ndarray]:
        """All utterances and the output track at :attr:`output_rate`.

        Each translation starts where its source utterance started, or right
        after the previous translation (plus a short gap) if that ran longer.
        """
        rate = self.output_rate
        pieces: list[tuple[int, np.ndarray]] = []
        utts = []
        cursor = 0
        for utt, speech in self.utterances(audio):
            start = max(int(utt.start_s * rate), cursor)
            pieces.append((start, speech))
            cursor = start + len(speech) + int(GAP_S * rate)
            utts.append(utt)
        total = max(cursor, int(len(audio) / SAMPLE_RATE * rate))
        track = np.zeros(total, dtype=np.float32)
        for start, speech in pieces:
            track[start : start + len(speech)] = speech
        return utts, track
