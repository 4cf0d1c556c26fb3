"""The stages of one pack, loaded once and owned by the worker."""

from __future__ import annotations

from dataclasses import dataclass

from edge_rt.backends.factory import BackendChoice
from edge_rt.stages.protocols import Asr, Translator, Tts, Turn, Vad
from edge_rt.route import Route, plan_route, targets


@dataclass(frozen=True)
class StageOptions:
    precision: str = "fp32"  # "fp32" | "int8"
    threads: int = 2  # ONNX Runtime intra-op threads for ASR and TTS
    backend: str = "auto"  # "cpu" | "tensorrt" | "auto" (TensorRT where the pack has engines for this GPU)
    # Load only what speaking this language needs: the MT pairs into it and its voice (``run``, ``serve``
    # and ``translate`` know it; None: every language of the pack). Into pt with the default pack this
    # leaves pt->en and the Piper voice unloaded (see edge_rt/measure/memory.py for the MB).
    target: str | None = None


class Stages:
    """VAD, ASR, MT and TTS of a built pack, and its end-of-turn model (build them with
    :func:`edge_rt.pipeline.load_stages`; ``turn`` is None in stages built by hand without one)."""

    def __init__(self, vad: Vad, asr: Asr, mt: Translator, tts: Tts, backend: BackendChoice | None = None, *,
                 turn: Turn | None = None):
        self.vad, self.asr, self.mt, self.tts, self.turn = vad, asr, mt, tts, turn
        self.backend = backend or BackendChoice("cpu", "stages given directly")

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
