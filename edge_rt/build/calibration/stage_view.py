"""The runtime's own stage classes over a pack that is still being built, with any engine swapped.

Calibration drives and the accuracy gates run exactly the code the runtime runs
(``Asr``, ``MarianDirection``, ``PiperVoice``/``Tts``, ``SileroVad``); this view builds
them from the manifest entries written so far, with chosen engines replaced (a
calibrating wrapper, or a candidate INT8 model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from edge_rt.backends.ort import OrtEngine, SessionOptions
from edge_rt.pack import BuiltPack

__all__ = ["StageView"]


@dataclass(frozen=True)
class StageView:
    pack_dir: Path
    stages: Mapping[str, Mapping[str, Any]]  # the manifest's "stages" as exported (fp32 files)
    threads: int = 2

    @property
    def pack(self) -> BuiltPack:
        return BuiltPack(self.pack_dir.name, self.pack_dir, {"pack": self.pack_dir.name, "stages": dict(self.stages)})

    def fp32(self, stage: str, model: str) -> Path:
        return self.pack_dir / self.stages[stage]["models"][model]["fp32"]

    def engine(self, stage: str, model: str, path: Path | None = None, threads: int | None = None) -> OrtEngine:
        """An ONNX Runtime engine of ``path`` (default: the model's FP32 file)."""
        return OrtEngine(path or self.fp32(stage, model), SessionOptions(intra_op_threads=threads or self.threads))

    # -- stages ------------------------------------------------------------------------------------
    def asr(self, encoder, decoder, **options):
        from edge_rt.stages.asr.whisper import Asr, AsrOptions
        from edge_rt.stages.asr.decoding import WhisperInference
        from edge_rt.stages.asr.tokenizer import WhisperTokenizer

        pack, entry = self.pack, self.stages["asr"]
        config = json.loads(pack.asset("asr", "config").read_text())
        tokenizer = WhisperTokenizer(pack.asset("asr", "tokenizer"), config.get("lang_ids", []), bool(entry["multilingual"]))
        return Asr(WhisperInference(encoder, decoder, entry["dims"]), tokenizer, entry["buckets_s"], AsrOptions(**options))

    def marian(self, pair: str, encoder, decoder):
        from edge_rt.stages.mt.marian import MarianDirection
        from edge_rt.stages.mt.shortlist import LexicalShortlist

        pack, entry = self.pack, self.stages["mt"]
        shortlist = None
        if f"{pair}/shortlist" in entry.get("assets", {}):
            shortlist = LexicalShortlist.load(pack.asset("mt", f"{pair}/shortlist"))
        return MarianDirection(encoder, decoder, pack.asset("mt", f"{pair}/vocab"),
                               tuple(int(b) for b in entry["src_buckets"]), float(entry.get("max_length_factor", 2.5)),
                               shortlist)

    def espeak(self):
        from edge_rt.stages.tts.espeak import Espeak

        pack = self.pack
        return Espeak(pack.asset("tts", "espeak_lib"), pack.asset("tts", "espeak_data"))

    def tts(self, voices: Mapping[str, Any] | None = None, length_scale: float | None = None):
        """A deterministic ``Tts`` (no noise: the same text gives the same waveform) with the given Piper engines."""
        from edge_rt.stages.tts.piper_ids import PiperVoiceConfig
        from edge_rt.stages.tts.voice import PiperVoice, Tts, TtsOptions

        pack, entry = self.pack, self.stages["tts"]
        options = TtsOptions(deterministic=True)
        built = {}
        for lang in entry.get("voices", {}):
            config = PiperVoiceConfig.from_dict(json.loads(pack.asset("tts", f"{lang}_config").read_text(encoding="utf-8")))
            engine = (voices or {}).get(lang) or self.engine("tts", lang)
            scales = (0.0, length_scale or config.length_scale, 0.0)
            built[lang] = PiperVoice(engine, config, scales, tuple(entry["phoneme_buckets"]))
        return Tts(built, self.espeak(), entry.get("formant_voices", {}), options)

    def vad(self, engine):
        from edge_rt.stages.vad import SileroVad

        return SileroVad(engine)
