"""``edge-rt eval``: accuracy of the product path on the real speech set.

Every clip goes through the same loop as ``edge-rt translate`` (VAD
endpointing → ASR → MT → TTS). Scores:

* ASR: WER (CER for zh) against the reference, both normalised
  (:mod:`edge_rt.measure.scoring`), on the reference segmentation (each clip decoded
  whole, language detected: the engines' accuracy), and on the loop's own
  segmentation (the joined utterance transcripts: what a live user gets, with
  the endpointer's cuts);
* translation: chrF and BLEU (sacrebleu) where a real parallel reference
  exists (``translations`` in manifest.jsonl; ``translations_informal`` scored
  separately, as they are glosses, not references);
* spoken output: the synthesized speech transcribed back with the pack's ASR
  (ASR-BLEU/chrF against the reference where one exists, and the round-trip
  WER against the text we meant to say, everywhere);
* INT8 vs FP32: the same for both precisions, and the deltas.

``edge-rt eval --noise`` (the clips mixed with babble, pink, brown and music-like noise) is
:mod:`edge_rt.measure.noise_eval`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_rt.audio.files import read_audio, resample
from edge_rt.measure.bench import BenchOptions, load_clips
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.pack import BuiltPack
from edge_rt.measure.scoring import error_rate, normalize, wer
from edge_rt.translate import TranslateOptions, translate_audio


@dataclass(frozen=True)
class EvalOptions:
    pack: str = "default"
    precisions: tuple[str, ...] = ("int8", "fp32")
    threads: int = 2
    backend: str = "auto"  # "cpu" | "tensorrt" | "auto": what runs the engines (edge_rt/backends/factory.py)
    clips: tuple[str, ...] = ()
    limit: int | None = None
    spoken: bool = True  # transcribe the synthesized output back (ASR-BLEU, round-trip WER)


def _target(clip: dict, targets: list[str]) -> str:
    """A language with a real reference translation when the pack can speak it, else the bench's choice."""
    for lang in (clip.get("translations") or {}):
        if lang in targets and lang != clip["lang"]:
            return lang
    return BenchOptions().target_for(clip["lang"])


def _reference(clip: dict, target: str) -> tuple[str | None, bool]:
    if target in (clip.get("translations") or {}):
        return clip["translations"][target], False
    if target in (clip.get("translations_informal") or {}):
        return clip["translations_informal"][target], True
    return None, False


def _corpus_scores(hyps: list[str], refs: list[str]) -> dict:
    import sacrebleu

    if not hyps:
        return {"n": 0, "chrf": None, "bleu": None}
    return {"n": len(hyps), "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
            "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)}


def evaluate_precision(pack: BuiltPack, precision: str, clips: list[dict], options: EvalOptions) -> dict:
    stages = load_stages(pack, StageOptions(precision=precision, threads=options.threads, backend=options.backend))
    per_clip = []
    by_lang: dict[str, tuple[list[str], list[str]]] = {}
    by_lang_live: dict[str, tuple[list[str], list[str]]] = {}
    mt_h, mt_r, inf_h, inf_r, asr_bleu_h, asr_bleu_r = [], [], [], [], [], []
    rt_refs, rt_hyps = [], []
    for c in clips:
        if c["lang"] not in stages.asr.languages:
            continue  # e.g. French on the English-only tiny pack
        audio = read_audio(c["path"])
        target = _target(c, stages.targets())
        utts, track, rate = translate_audio(stages, audio, TranslateOptions(target=target))
        text = " ".join(u.text for u in utts)
        translation = " ".join(u.translation for u in utts)
        whole = stages.asr.transcribe(audio).text
        for table, hyp in ((by_lang, whole), (by_lang_live, text)):
            refs, hyps = table.setdefault(c["lang"], ([], []))
            refs.append(c["text"])
            hyps.append(hyp)
        row = {"id": c["id"], "lang": c["lang"], "target": target, "asr_whole": whole, "text": text,
               "translation": translation}
        ref, informal = _reference(c, target)
        heard = None
        if options.spoken and translation and np.any(track) and target in stages.asr.languages:
            heard = stages.asr.transcribe(resample(track, rate), language=target).text
            row["heard"] = heard
            rt_refs.append(translation)
            rt_hyps.append(heard)
        if ref is not None:
            row["reference"] = ref
            (inf_h if informal else mt_h).append(translation)
            (inf_r if informal else mt_r).append(ref)
            if heard is not None and not informal:
                asr_bleu_h.append(heard)
                asr_bleu_r.append(ref)
        per_clip.append(row)
    norm = lambda xs: [normalize(x) for x in xs]  # noqa: E731 - references are normalised FLEURS text
    result = {
        "asr": _error_rates(by_lang),
        "asr_live_segmentation": _error_rates(by_lang_live),
        "translation": _corpus_scores(norm(mt_h), norm(mt_r)),
        "translation_informal": _corpus_scores(norm(inf_h), norm(inf_r)),
        "asr_bleu": _corpus_scores(norm(asr_bleu_h), norm(asr_bleu_r)),
        "clips": per_clip,
    }
    if rt_refs:
        rt = [(r, h) for r, h in zip(rt_refs, rt_hyps) if normalize(r)]
        result["spoken_roundtrip_wer"] = round(100 * wer([r for r, _ in rt], [h for _, h in rt], lang="en"), 2)
    return result


def _error_rates(by_lang: dict[str, tuple[list[str], list[str]]]) -> dict:
    out = {}
    for lang, (refs, hyps) in sorted(by_lang.items()):
        metric, value = error_rate(refs, hyps, lang)
        out[lang] = {"metric": metric, "n": len(refs), "value": value}
    return out


def evaluate(options: EvalOptions) -> dict:
    pack = BuiltPack.load(options.pack)
    clips = load_clips(BenchOptions(pack=options.pack, clips=options.clips, limit=options.limit))
    out: dict = {"pack": options.pack, "precisions": {}}
    for p in options.precisions:
        out["precisions"][p] = evaluate_precision(pack, p, clips, options)
    if {"int8", "fp32"} <= set(options.precisions):
        a, b = out["precisions"]["int8"], out["precisions"]["fp32"]
        out["int8_minus_fp32"] = {
            "asr": {lang: round(a["asr"][lang]["value"] - b["asr"][lang]["value"], 2) for lang in a["asr"]},
            "asr_live_segmentation": {lang: round(a["asr_live_segmentation"][lang]["value"]
                                                  - b["asr_live_segmentation"][lang]["value"], 2)
                                      for lang in a["asr_live_segmentation"]},
            "chrf": _delta(a["translation"]["chrf"], b["translation"]["chrf"]),
            "asr_bleu": _delta(a["asr_bleu"]["bleu"], b["asr_bleu"]["bleu"]),
        }
    return out


def _delta(a, b):
    return None if a is None or b is None else round(a - b, 2)
