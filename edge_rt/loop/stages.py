"""The four stages of one pack, loaded once and owned by the worker."""

from __future__ import annotations

from dataclasses import dataclass

from edge_rt.pack import BuiltPack
from edge_rt.route import Route, plan_route, targets


@dataclass(frozen=True)
class StageOptions:
    precision: str = "fp32"  # "fp32" | "int8"
    threads: int = 2  # ONNX Runtime intra-op threads for ASR and TTS


class Stages:
    """VAD, ASR, MT and TTS of a built pack."""

    def __init__(self, vad, asr, mt, tts):
        self.vad, self.asr, self.mt, self.tts = vad, asr, mt, tts

    @classmethod
    def load(cls, pack: BuiltPack, options: StageOptions = StageOptions()) -> "Stages":
        from edge_rt.stages.asr.whisper import Asr, AsrOptions
        from edge_rt.stages.mt.translator import MtOptions, Translator
        from edge_rt.stages.tts.voice import Tts, TtsOptions
        from edge_rt.stages.vad import SileroVad, VadOptions

        return cls(
            SileroVad.from_pack(pack, VadOptions(precision=options.precision)),
            Asr.from_pack(pack, AsrOptions(precision=options.precision, threads=options.threads)),
            Translator.from_pack(pack, MtOptions(precision=options.precision)),
            Tts.from_pack(pack, TtsOptions(precision=options.precision, threads=options.threads)),
        )

    def _capabilities(self) -> dict:
        return dict(
            asr_languages=self.asr.languages,
            mt_pairs={tuple(p.split("-")) if isinstance(p, str) else tuple(p) for p in self.mt.pairs},
            tts_languages=self.tts.languages,
            asr_can_translate=self.asr.multilingual,
        )

    def route(self, source: str, target: str) -> Route:
        """How ``source`` speech becomes ``target`` speech; raises naming what is possible."""
        return plan_route(source, target, **self._capabilities())

    def targets(self) -> list[str]:
        """Languages this pack can speak translations in."""
        return targets(**self._capabilities())
