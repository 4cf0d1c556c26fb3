"""Accuracy gates: every INT8 model against its FP32 twin, on data calibration never saw.

=======  ==============================================================  =========================
stage    measure                                                         passes when
=======  ==============================================================  =========================
asr      WER on the real English clips (``shared/data/speech``, 12,      upper end of the 95 %
         213 words) + the held-out corpus sentences spoken by every      interval of the paired
         English voice of the recipe (:data:`ASR_GATE_VOICES`; 30 x 8,   delta <= 1.0 pt
         ~2,000 words): ~2,200 reference words in two stages (below)
mt       chrF (sacrebleu) on held-out corpus lines vs. their parallel     delta >= -1.0
         translation (a committed reference set)
tts      WER of the pack's FP32 Whisper on held-out sentences spoken     upper end of the 95 %
         by the Piper voice (deterministic synthesis)                    interval <= 2.0 pt
vad      F1 of speech frames at the runtime threshold 0.5 on the         drop <= 0.01
         held-out synthesized set (labels from the clean speech)
=======  ==============================================================  =========================

The WER gates compare INT8 with FP32 utterance by utterance (:mod:`stats`: paired bootstrap with a
fixed seed, non-inferiority rule). The ASR gate runs in two stages to keep the build short: a
*screen* (the real clips and the first voice's sentences, ~460 words) drops a recipe only when it
is clearly worse than the limit (the interval's lower end above it); every other recipe is decoded
on the whole set, and only the whole set decides acceptance.

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
from edge_rt.build.calibration.stats import PairedRatio, accepts, paired_ratio, screen_rejects
from edge_rt.build.calibration.workers import map_on_workers
from edge_rt.pack import repo_root

__all__ = ["ASR_GATE_VOICES", "GateResult", "Gates", "GATE_LIMITS", "GateUtterance", "speech_dir", "f1",
           "compare_tensors", "word_edits"]

VAD_THRESHOLD = 0.5  # the runtime's speech threshold
TTS_SENTENCES = 20  # held-out sentences the Piper gate speaks
# espeak-ng voices (name, words per minute) that speak the held-out sentences for the ASR gate only, on top of
# the recipe's English voices (Piper x3 rates, espeak en-us/en/en-us fast/de): 7 voices x 248 words + the
# 213 words of the real clips is 1,949; one more accent takes the gate past the 2,000 words it needs.
ASR_GATE_VOICES = (("en-gb-x-rp", 165),)
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
    paired: PairedRatio | None = None  # per-utterance statistics (WER gates): words, 95 % interval
    rule: str = "point"  # "point": delta vs limit | "upper95": interval's upper end <= limit |
    #                      "screen": passes unless the interval's lower end > limit (stats.screen_rejects)
    screen: dict | None = None  # the screen's result, on a full-set result that followed it

    @property
    def delta(self) -> float:
        return self.int8 - self.fp32

    @property
    def passed(self) -> bool:
        if self.rule == "upper95" and self.paired is not None:
            return accepts(self.paired, self.limit)
        if self.rule == "screen" and self.paired is not None:
            return not screen_rejects(self.paired, self.limit)
        if GATE_LIMITS[self.stage][2] == "lower":
            return self.delta <= self.limit + 1e-12
        return self.delta >= self.limit - 1e-12

    def as_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("paired", "screen")}
        if self.paired is not None:
            d.update(self.paired.as_dict())
        if self.screen is not None:
            d["screen"] = self.screen
        return {**d, "delta": round(self.delta, 5), "passed": self.passed}


@dataclass(frozen=True)
class GateUtterance:
    """One utterance of the ASR gate set."""

    audio: np.ndarray  # float32 [n] at 16 kHz
    text: str  # reference
    source: str  # "clip:<id>" or the voice's name
    screen: bool  # part of the first-stage screen


def word_edits(refs: list[str], hyps: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per-utterance word edits (substitutions + deletions + insertions) and reference words, after
    the runtime scorer's normalisation (:func:`edge_rt.measure.scoring.normalize`)."""
    import jiwer

    from edge_rt.measure.scoring import normalize

    edits, words = [], []
    for r, h in zip(refs, hyps, strict=True):
        r, h = normalize(r), normalize(h)
        if not r:
            raise ValueError(f"reference {r!r} is empty after normalisation; a WER gate needs reference words")
        o = jiwer.process_words(r, h)
        edits.append(o.substitutions + o.deletions + o.insertions)
        words.append(len(r.split()))
    return np.asarray(edits, np.int64), np.asarray(words, np.int64)


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
        # The WER gates decode on ``view.threads`` threads, each with one-thread engines (:mod:`workers`).
        self.workers = max(1, view.threads)
        self._engine_threads = 1 if self.workers > 1 else view.threads

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

    def asr_set(self) -> list[GateUtterance]:
        """The ASR gate's utterances: the real English clips, then the held-out English sentences spoken by
        each English voice of the recipe and :data:`ASR_GATE_VOICES`, in a fixed order (voice-major).

        The clips and the first voice's sentences form the screen. Synthesis is deterministic, so the
        set is the same in every build of the same pack.
        """
        if "asr_set" in self._fp32:
            return self._fp32["asr_set"]
        from edge_rt.audio.files import read_audio, resample

        clips = self.english_clips()
        out = [GateUtterance(read_audio(self.clips / c["audio"]), c["text"], f"clip:{c.get('id', c['audio'])}", True)
               for c in clips]
        sentences = self.data.corpora["en"].held_out
        for i, voice in enumerate(self.asr_voices()):
            for text in sentences:
                audio, rate = voice.speak(text)
                out.append(GateUtterance(resample(np.asarray(audio, np.float32), rate), text, voice.name, i == 0))
        self._fp32["asr_set"] = out
        return out

    def asr_voices(self) -> list:
        """The recipe's English voices (:func:`inputs.pack_voices`) and the gate-only ones, in a fixed order."""
        from edge_rt.build.calibration.audio import Voice
        from edge_rt.build.calibration.inputs import pack_voices
        from edge_rt.errors import UnsupportedLanguageError
        from edge_rt.stages.tts.espeak import Espeak

        voices = [v for v in pack_voices(self.view) if v.lang == "en"]
        pack = self.view.pack
        for name, wpm in ASR_GATE_VOICES:
            espeak = Espeak(pack.asset("tts", "espeak_lib"), pack.asset("tts", "espeak_data"), wpm)
            try:
                if not espeak.phonemize("1 2 3", name):
                    continue
            except UnsupportedLanguageError:
                continue
            voices.append(Voice(f"espeak:{name}@{wpm}", "en", lambda t, e=espeak, n=name: e.synthesize(t, n)))
        return voices

    def _asr_hyps(self, encoder: Path | None, decoder: Path | None, which: list[int]) -> dict[int, str]:
        """Transcripts of the gate utterances ``which``, kept per (encoder, decoder): the screen's are reused by
        the full set, FP32's by every model of the stage."""
        v = self.view
        done: dict[int, str] = self._fp32.setdefault("asr_hyps", {}).setdefault((encoder, decoder), {})
        todo = [i for i in which if i not in done]
        if todo:
            utts = self.asr_set()
            t = self._engine_threads
            texts = map_on_workers(lambda: v.asr(v.engine("asr", "encoder", encoder, t), v.engine("asr", "decoder", decoder, t)),
                                   lambda asr, i: asr.transcribe(utts[i].audio, language="en").text, todo, self.workers)
            done.update(zip(todo, texts))
        return {i: done[i] for i in which}

    def _asr_paired(self, chosen: Mapping[str, Path], which: list[int]) -> PairedRatio:
        utts = self.asr_set()
        refs = [utts[i].text for i in which]
        base = self._asr_hyps(None, None, which)
        got = self._asr_hyps(chosen.get("encoder"), chosen.get("decoder"), which)
        e32, words = word_edits(refs, [base[i] for i in which])
        e8, _ = word_edits(refs, [got[i] for i in which])
        return paired_ratio(e32, e8, words)

    def _asr(self, chosen: Mapping[str, Path]) -> GateResult:
        utts = self.asr_set()
        screen = [i for i, u in enumerate(utts) if u.screen]
        limit = GATE_LIMITS["asr"][1]
        n_clips = sum(1 for u in utts if u.source.startswith("clip:"))
        voices = {u.source for u in utts if not u.source.startswith("clip:")}
        what = (f"{self.clips.name}/manifest.jsonl lang=en ({n_clips} clips) + held-out "
                f"calibration/sentences_en.txt spoken by {len(voices)} voices")
        s = self._asr_paired(chosen, screen)
        first = GateResult("asr", "WER", s.fp32, s.int8, limit, s.items, f"screen: {what.split(' + ')[0]} + "
                           f"the first voice", s, "screen")
        if not first.passed:
            return first
        full = self._asr_paired(chosen, list(range(len(utts))))
        return GateResult("asr", "WER", full.fp32, full.int8, limit, full.items, what, full, "upper95",
                          screen=first.as_dict())

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
    def _tts_hyps(self, lang: str, path: Path | None) -> list[str]:
        from edge_rt.audio.files import resample

        v, t = self.view, self._engine_threads

        def make():
            return v.tts({lang: v.engine("tts", lang, path, t)}), v.asr(v.engine("asr", "encoder", threads=t),
                                                                         v.engine("asr", "decoder", threads=t))

        def hear(worker, sentence: str) -> str:
            tts, asr = worker
            audio = tts.synthesize(sentence, lang)
            return asr.transcribe(resample(audio.samples, audio.sample_rate), language="en").text

        return map_on_workers(make, hear, self._tts_sentences(lang), self.workers)

    def _tts_sentences(self, lang: str) -> list[str]:
        return list(self.data.corpora[lang.split("-")[0]].held_out[:TTS_SENTENCES])

    def _tts(self, lang: str, path: Path | None) -> GateResult:
        key = f"tts/{lang}"
        if key not in self._fp32:
            self._fp32[key] = self._tts_hyps(lang, None)
        refs = self._tts_sentences(lang)
        e32, words = word_edits(refs, self._fp32[key])
        e8, _ = word_edits(refs, self._tts_hyps(lang, path))
        r = paired_ratio(e32, e8, words)
        return GateResult("tts", "WER", r.fp32, r.int8, GATE_LIMITS["tts"][1], r.items,
                          f"held-out calibration/sentences_{lang.split('-')[0]}.txt spoken, heard by FP32 Whisper",
                          r, "upper95")

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
