"""Accuracy gates: every INT8 model against its FP32 twin, on data calibration never saw.

=======  ==============================================================  ==============
stage    measure                                                         passes when
=======  ==============================================================  ==============
asr      WER on the real English clips (``shared/data/speech``, 12)      delta <= 1.0 pt
mt       chrF (sacrebleu) on held-out corpus lines vs. their parallel     delta >= -1.0
         translation (a committed reference set)
tts      WER of the pack's FP32 Whisper on held-out sentences spoken     delta <= 2.0 pt
         by the Piper voice (deterministic synthesis)
vad      F1 of speech frames at the runtime threshold 0.5 on the         drop <= 0.01
         held-out synthesized set (labels from the clean speech)
=======  ==============================================================  ==============

Each gate runs the runtime's own stage code with the candidate engine swapped in; the
models gated earlier in the same stage keep the precision they were given. The
tensor-level comparison through Polygraphy's ``Comparator`` is recorded beside (it does
not decide).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from edge_rt.build.calibration.inputs import CalibrationData
from edge_rt.build.calibration.stage_view import StageView
from edge_rt.pack import repo_root

__all__ = ["GateResult", "Gates", "GATE_LIMITS", "speech_dir", "f1", "compare_tensors"]

VAD_THRESHOLD = 0.5  # the runtime's speech threshold
TTS_SENTENCES = 20  # held-out sentences the Piper gate speaks
# stage -> (metric, limit, "lower" if lower is better)
GATE_LIMITS = {"asr": ("WER", 0.010, "lower"), "mt": ("chrF", -1.0, "higher"),
               "tts": ("WER", 0.020, "lower"), "vad": ("F1", -0.01, "higher")}


def speech_dir() -> Path:
    """The real evaluation clips: ``$EDGE_RT_SPEECH`` or ``<repo>/../shared/data/speech``."""
    env = os.environ.get("EDGE_RT_SPEECH")
    return Path(env) if env else repo_root().parent / "shared" / "data" / "speech"


@dataclass(frozen=True)
class GateResult:
    stage: str
    metric: str  # "WER" | "chrF" | "F1"
    fp32: float
    int8: float
    limit: float  # max increase (lower-is-better metrics) or min delta (higher-is-better)
    n: int  # items measured (clips, sentences, frames)
    data: str  # what it was measured on

    @property
    def delta(self) -> float:
        return self.int8 - self.fp32

    @property
    def passed(self) -> bool:
        if GATE_LIMITS[self.stage][2] == "lower":
            return self.delta <= self.limit + 1e-12
        return self.delta >= self.limit - 1e-12

    def as_dict(self) -> dict:
        return {**asdict(self), "delta": round(self.delta, 5), "passed": self.passed}


def f1(predicted: np.ndarray, truth: np.ndarray) -> float:
    """F1 of boolean frame decisions (1.0 when both are empty)."""
    p, t = np.asarray(predicted, bool), np.asarray(truth, bool)
    tp = int(np.sum(p & t))
    if not p.any() and not t.any():
        return 1.0
    return 2 * tp / (int(p.sum()) + int(t.sum()))


class Gates:
    """The four gates of one build; FP32 baselines are computed once and reused."""

    def __init__(self, view: StageView, data: CalibrationData, clips: Path | None = None):
        self.view = view
        self.data = data
        self.clips = clips or speech_dir()
        self._fp32: dict[str, object] = {}

    def check(self, stage: str, model: str, chosen: Mapping[str, Path]) -> GateResult:
        """The gate of ``stage`` with the models in ``chosen`` (model -> INT8 file) swapped in."""
        if stage == "asr":
            return self._asr(chosen)
        if stage == "mt":
            pair = model.split("/")[0]
            return self._mt(pair, {m: p for m, p in chosen.items() if m.startswith(f"{pair}/")})
        if stage == "tts":
            return self._tts(model, chosen.get(model))
        return self._vad(model, chosen.get(model))

    # -- ASR -------------------------------------------------------------------------------------
    def english_clips(self) -> list[dict]:
        from edge_rt.build.calibration.calibrate import CalibrationError

        manifest = self.clips / "manifest.jsonl"
        if not manifest.is_file():
            raise CalibrationError(
                f"the Whisper gate needs the real English clips: {manifest} is missing; set EDGE_RT_SPEECH to "
                f"the folder holding manifest.jsonl (the build keeps Whisper in FP32 until then)"
            )
        rows = [json.loads(ln) for ln in manifest.read_text().splitlines() if ln.strip()]
        return [r for r in rows if r.get("lang") == "en"]

    def _asr_wer(self, encoder: Path | None, decoder: Path | None) -> tuple[float, int]:
        from edge_rt.audio.files import read_audio
        from edge_rt.measure.scoring import wer

        v = self.view
        clips = self.english_clips()
        if "asr_audio" not in self._fp32:
            self._fp32["asr_audio"] = [read_audio(self.clips / c["audio"]) for c in clips]
        asr = v.asr(v.engine("asr", "encoder", encoder), v.engine("asr", "decoder", decoder))
        hyps = [asr.transcribe(a, language="en").text for a in self._fp32["asr_audio"]]
        return wer([c["text"] for c in clips], hyps), len(clips)

    def _asr(self, chosen: Mapping[str, Path]) -> GateResult:
        if "asr" not in self._fp32:
            self._fp32["asr"] = self._asr_wer(None, None)[0]
        got, n = self._asr_wer(chosen.get("encoder"), chosen.get("decoder"))
        return GateResult("asr", "WER", self._fp32["asr"], got, GATE_LIMITS["asr"][1], n,
                          f"{self.clips.name}/manifest.jsonl lang=en")

    # -- MT --------------------------------------------------------------------------------------
    def _chrf(self, pair: str, chosen: Mapping[str, Path]) -> tuple[float, int]:
        import sacrebleu

        v = self.view
        src, tgt = pair.split("-")
        enc = v.engine("mt", f"{pair}/encoder", chosen.get(f"{pair}/encoder"), threads=1)
        dec = v.engine("mt", f"{pair}/decoder", chosen.get(f"{pair}/decoder"), threads=1)
        direction = v.marian(pair, enc, dec)
        sources, refs = self.data.corpora[src].held_out, self.data.corpora[tgt].held_out
        hyps = [direction.translate(s) for s in sources]
        return float(sacrebleu.corpus_chrf(hyps, [list(refs)]).score), len(sources)

    def _mt(self, pair: str, chosen: Mapping[str, Path]) -> GateResult:
        key = f"mt/{pair}"
        if key not in self._fp32:
            self._fp32[key] = self._chrf(pair, {})[0]
        got, n = self._chrf(pair, chosen)
        return GateResult("mt", "chrF", self._fp32[key], got, GATE_LIMITS["mt"][1], n,
                          f"held-out calibration/sentences_{pair.split('-')[0]}.txt vs sentences_{pair.split('-')[1]}.txt")

    # -- TTS -------------------------------------------------------------------------------------
    def _tts_wer(self, lang: str, path: Path | None) -> tuple[float, int]:
        from edge_rt.audio.files import resample
        from edge_rt.measure.scoring import wer

        v = self.view
        if "tts_asr" not in self._fp32:
            self._fp32["tts_asr"] = v.asr(v.engine("asr", "encoder"), v.engine("asr", "decoder"))
        asr = self._fp32["tts_asr"]
        tts = v.tts({lang: v.engine("tts", lang, path)})
        sentences = self.data.corpora[lang.split("-")[0]].held_out[:TTS_SENTENCES]
        hyps = []
        for s in sentences:
            audio = tts.synthesize(s, lang)
            hyps.append(asr.transcribe(resample(audio.samples, audio.sample_rate), language="en").text)
        return wer(list(sentences), hyps), len(sentences)

    def _tts(self, lang: str, path: Path | None) -> GateResult:
        key = f"tts/{lang}"
        if key not in self._fp32:
            self._fp32[key] = self._tts_wer(lang, None)[0]
        got, n = self._tts_wer(lang, path)
        return GateResult("tts", "WER", self._fp32[key], got, GATE_LIMITS["tts"][1], n,
                          f"held-out calibration/sentences_{lang.split('-')[0]}.txt spoken, heard by FP32 Whisper")

    # -- VAD -------------------------------------------------------------------------------------
    def _vad_f1(self, model: str, path: Path | None) -> tuple[float, int]:
        vad = self.view.vad(self.view.engine("vad", model, path, threads=1))
        pred, truth = [], []
        for s in self.data.held_out:
            pred.append(vad.probabilities(s.audio) >= VAD_THRESHOLD)
            truth.append(s.speech)
        p, t = np.concatenate(pred), np.concatenate(truth)
        return f1(p, t), int(t.size)

    def _vad(self, model: str, path: Path | None) -> GateResult:
        key = f"vad/{model}"
        if key not in self._fp32:
            self._fp32[key] = self._vad_f1(model, None)[0]
        got, n = self._vad_f1(model, path)
        return GateResult("vad", "F1", self._fp32[key], got, GATE_LIMITS["vad"][1], n,
                          "held-out synthesized set, frames at threshold 0.5")


def compare_tensors(fp32: Path, int8: Path, feeds: list[Mapping[str, np.ndarray]]) -> dict:
    """Output-by-output comparison of two models with Polygraphy's ONNX Runtime ``Comparator``.

    Returns ``{"tool": "polygraphy x.y", "inputs": n, "outputs": {name: {max_abs, rel_l2}}, "allclose": bool}``
    or ``{"skipped": reason}`` when Polygraphy is not installed (``pip install polygraphy==0.53.6``).
    """
    os.environ.setdefault("POLYGRAPHY_AUTOINSTALL_DEPS", "0")
    try:
        import polygraphy
        from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
        from polygraphy.comparator import Comparator, SimpleCompareFunc
        from polygraphy.logger import G_LOGGER
    except ImportError:
        return {"skipped": "polygraphy is not installed (pip install polygraphy==0.53.6)"}
    if not feeds:
        return {"skipped": "no probe inputs were recorded"}
    import contextlib
    import io

    G_LOGGER.module_severity = G_LOGGER.CRITICAL
    runners = [OnnxrtRunner(SessionFromOnnx(str(fp32), providers=["cpu"]), name="fp32"),
               OnnxrtRunner(SessionFromOnnx(str(int8), providers=["cpu"]), name="int8")]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        results = Comparator.run(runners, data_loader=[dict(f) for f in feeds])
        accuracy = Comparator.compare_accuracy(results, compare_func=SimpleCompareFunc(atol=1e-2, rtol=1e-1))
    outs: dict[str, dict] = {}
    (_, ref_iters), (_, got_iters) = results[0], results[1]
    for ref, got in zip(ref_iters, got_iters):
        for name in ref.keys():
            a, b = np.asarray(ref[name], np.float64), np.asarray(got[name], np.float64)
            if a.shape != b.shape or a.dtype.kind not in "fc":
                continue
            o = outs.setdefault(name, {"max_abs": 0.0, "rel_l2": 0.0})
            o["max_abs"] = max(o["max_abs"], float(np.max(np.abs(a - b))) if a.size else 0.0)
            o["rel_l2"] = max(o["rel_l2"], float(np.linalg.norm(a - b) / (np.linalg.norm(a) + 1e-12)))
    return {"tool": f"polygraphy {polygraphy.__version__} Comparator (onnxrt)", "inputs": len(feeds),
            "compare": "simple atol=1e-2 rtol=1e-1", "allclose": bool(accuracy),
            "outputs": {k: {kk: round(vv, 6) for kk, vv in v.items()} for k, v in outs.items()}}
