"""``edge-rt eval --noise``: the product path on the real clips mixed with noise (:mod:`edge_rt.measure.noise`).

Each clip is first run through the loop clean (zero-padded like the mixes): that run is the
reference for the clip's segmentation and its "clean" row. Then per noise kind and SNR:

* **VAD F1**: per 32 ms frame, inside-an-utterance or not, as the loop decides on the mix (VAD,
  endpointer and turn policy: the traces' spans), against what it decides on the clean clip;
* **VAD F1, endpointer only, every language**: the same without decoding (the pack's VAD and a fresh
  :class:`Endpointer`, no turn policy, which needs transcripts), so the non-English clips count too;
* **WER** (English clips): the loop's captions joined, against the reference;
* **empty**: mixes whose clip holds speech but the loop wrote no text at all;
* **invented**: utterances with text that overlap no utterance of the clean run: they lie in a
  noise-only stretch (the ``pad_s`` of noise before and after the clip, or a pause of the clip);
* **turn latency**: the traces' end of speech → first output under ``edge-rt translate``'s fast file
  source: compute after the end of speech (the pause wait is not in it);
* **drops**: why utterances produced nothing (the loop's unsure gate, Whisper's own no-speech rule,
  an empty translation, ...): the evidence for *why* words go missing.

``peer=True`` runs faster-whisper (:meth:`PeerStack.segments`, the same Whisper weights, int8, its
Silero ``vad_filter``) on the same audio: WER, empty, invented. ``frontends`` runs the loop without
and/or with the capture front end (:mod:`edge_rt.audio.frontend`, see :data:`FRONTENDS`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import TimelineSink
from edge_rt.audio.sources import FastFileSource
from edge_rt.loop.endpoint import EndpointOptions, Endpointer
from edge_rt.loop.loop import Loop
from edge_rt.loop.observer import LoopObserver
from edge_rt.loop.options import LoopOptions
from edge_rt.loop.stages import Stages
from edge_rt.loop.trace import UtteranceTrace, percentiles
from edge_rt.measure.noise import NoiseOptions, NoisyMix, noisy_mixes
from edge_rt.measure.paused import PauseOptions, paused_clip
from edge_rt.measure.scoring import wer
from edge_rt.stages.asr.tokenizer import has_words
from edge_rt.units import SAMPLE_RATE, VAD_FRAME

__all__ = ["NoiseEvalOptions", "evaluate_noise", "noise_clips", "segment", "frames_of", "vad_counts", "f1",
           "invented", "wer_difference"]

TAIL_S = 1.0  # FastFileSource's default tail of silence: the offline segmentation sees it too
WER_LANG = "en"
# The capture front end a run uses (LoopOptions.frontend). "on" is WebRTC's noise suppressor at its
# mildest level with its high-pass (the echo canceller has no reference in a file run, so it is left
# off): what `--frontend on` is meant to test here is noise, not echo.
FRONTENDS = ("off", "on")


@dataclass(frozen=True)
class NoiseEvalOptions:
    pack: str = "default"
    precision: str = "int8"
    threads: int = 2
    backend: str = "auto"
    clips: tuple[str, ...] = ()  # clip ids; empty = every clip of the chosen languages
    limit: int | None = None  # at most this many clips per language (--clips N)
    asr_langs: tuple[str, ...] = (WER_LANG,)  # clips run through the whole loop (WER needs a reference language)
    vad_langs: tuple[str, ...] | None = None  # clips scored for the endpointer-only VAD F1 (None: every language)
    noise: NoiseOptions = field(default_factory=NoiseOptions)
    peer: bool = False  # faster-whisper on the same mixes (dev extra)
    given_language: bool = False  # False: detect per utterance, like `edge-rt translate`; True: the clip's, both sides
    frontends: tuple[str, ...] = ("off",)  # keys of FRONTENDS: each mix runs once per entry
    # LoopOptions fields replaced for an experiment, e.g. (("unsure", None),) (see loop_options()).
    loop_overrides: tuple[tuple[str, object], ...] = ()
    # An experiment's processing of every noisy mix before the loop hears it (a neural noise suppressor:
    # tools/try_noise_suppressor.py); the clean references and the peer get the audio as mixed.
    enhance: Callable[[np.ndarray], np.ndarray] | None = None
    speech_dir: Path | None = None
    # Each clip with a word-search pause inserted mid-sentence before it is mixed (bench's paused set: paused.py,
    # room tone in the pause, the noise running through it); clips with no place for one are left out. None: as
    # recorded. Hesitations in noise, for the loop and the peer alike.
    paused: PauseOptions | None = None


# -- pure scoring --------------------------------------------------------------------------------

Span = tuple[int, int]  # [start, end) in samples


def segment(probs: Sequence[float], options: EndpointOptions = EndpointOptions()) -> list[Span]:
    """Utterance spans the endpointer opens over per-frame VAD probabilities ``probs`` (frame i = samples
    [512 i, 512 (i + 1))), closed at the end of the stream as the loop flushes."""
    ep, spans, start = Endpointer(options), [], None
    for i, p in enumerate(probs):
        for e in ep.push(i, float(p)):
            if e.kind == "start":
                start = e.sample
            elif start is not None:
                spans.append((start, e.sample))
                start = None
    for e in ep.flush(len(probs)):
        if start is not None:
            spans.append((start, e.sample))
    return spans


def frames_of(spans: Sequence[Span], n_frames: int) -> np.ndarray:
    """bool per 512-sample frame: the frame overlaps a span."""
    out = np.zeros(n_frames, bool)
    for a, b in spans:
        if b > a:
            out[max(0, a // VAD_FRAME) : min(n_frames, -(-b // VAD_FRAME))] = True
    return out


def vad_counts(ref: np.ndarray, hyp: np.ndarray) -> tuple[int, int, int]:
    """(true positives, false positives, false negatives) of per-frame speech decisions."""
    if ref.shape != hyp.shape:
        raise ValueError(f"reference {ref.shape} and hypothesis {hyp.shape} frames differ in length")
    return int(np.sum(ref & hyp)), int(np.sum(~ref & hyp)), int(np.sum(ref & ~hyp))


def f1(tp: int, fp: int, fn: int) -> dict:
    """Precision, recall, F1 (None where undefined: nothing predicted / nothing to find)."""
    p = tp / (tp + fp) if tp + fp else None
    r = tp / (tp + fn) if tp + fn else None
    f = 2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)
    return {"precision": _r(p), "recall": _r(r), "f1": _r(f)}


def invented(utterances: Sequence[tuple[int, int, str]], reference: Sequence[Span]) -> list[tuple[int, int, str]]:
    """Utterances (start, end, text) with text (a letter or digit) that overlap no reference span."""
    return [u for u in utterances if has_words(u[2])
            and not any(u[0] < b and a < u[1] for a, b in reference)]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# -- running ---------------------------------------------------------------------------------------

class _RecordingAsr:
    """The pack's ASR, remembering its results: the last decided a dropped utterance (tools/tune_unsure.py reads
    them all)."""

    def __init__(self, asr):
        self._asr, self.results = asr, []

    @property
    def last(self):
        return self.results[-1] if self.results else None

    def transcribe(self, audio, **kw):
        self.results.append(self._asr.transcribe(audio, **kw))
        return self.results[-1]

    def with_options(self, options):
        """A view with other decoding options (the loop's beam search) that records into the same list."""
        view = _RecordingAsr(self._asr.with_options(options))
        view.results = self.results
        return view

    def __getattr__(self, name):
        return getattr(self._asr, name)


class _DropReasons(LoopObserver):
    """Why each utterance was dropped; "no speech recognised" split into the loop's unsure gate and Whisper's
    own no-speech rule (a dropped utterance is published at once, so the ASR's last result decided it)."""

    def __init__(self, asr: _RecordingAsr, unsure: tuple[float, float] | None):
        self.asr, self.unsure, self.reasons, self.gated = asr, unsure, [], []

    def on_utterance(self, tr: UtteranceTrace) -> None:
        if not tr.dropped:
            return
        r, reason = self.asr.last, tr.dropped.split(":")[0].split(" (")[0]
        if tr.dropped.startswith("no speech recognised") and r is not None:
            u = self.unsure
            if r.text.strip() and u is not None and r.no_speech_prob > u[0] and r.avg_logprob < u[1]:
                reason = "unsure gate"
                self.gated.append({"text": r.text, "no_speech_prob": round(r.no_speech_prob, 3),
                                   "avg_logprob": round(r.avg_logprob, 3), "lang": r.language})
            else:
                reason = "whisper no speech"
        self.reasons.append(reason)


def loop_options(target: str, source: str | None, options: NoiseEvalOptions, frontend: str = "off") -> LoopOptions:
    """The loop's options for one run: `edge-rt translate`'s (no partials), the front end, the experiment's overrides.

    The one place where a loop-side switch enters the noise eval.
    """
    if frontend not in FRONTENDS:
        raise ValueError(f"frontend must be one of {', '.join(FRONTENDS)}, not {frontend!r}")
    fe = None
    if frontend == "on":
        from edge_rt.audio.frontend import FrontEndOptions

        fe = FrontEndOptions(echo_cancellation=False, noise_suppression=True, ns_level=1, high_pass_filter=True)
    base = LoopOptions(target=target, source=source, partials=False, frontend=fe)
    return dataclasses.replace(base, **dict(options.loop_overrides)) if options.loop_overrides else base


def run_loop(stages: Stages, audio: np.ndarray, options: LoopOptions) -> tuple[list[UtteranceTrace], _DropReasons]:
    """The loop over ``audio`` as ``edge-rt translate`` runs it; every trace (dropped ones too)."""
    import copy

    asr = _RecordingAsr(stages.asr)
    rec_stages = copy.copy(stages)
    rec_stages.asr = asr
    drops = _DropReasons(asr, options.unsure)
    source = FastFileSource(audio, tail_s=TAIL_S)
    rate = stages.tts.sample_rate(options.target) if options.target in stages.tts.languages else SAMPLE_RATE
    sink = TimelineSink(rate, now_s=lambda: source.ring.read_index / SAMPLE_RATE)
    traces = Loop(rec_stages, source, sink, options, observers=(drops,)).run()
    return list(traces), drops


def offline_spans(vad, audio: np.ndarray, endpoint: EndpointOptions) -> list[Span]:
    """The VAD + endpointer's utterance spans on ``audio`` (no turn policy, no decoding), with the file tail."""
    padded = np.concatenate([audio.astype(np.float32), np.zeros(int(TAIL_S * SAMPLE_RATE), np.float32)])
    whole = len(padded) // VAD_FRAME * VAD_FRAME  # the loop reads whole hops only
    return segment(vad.probabilities(padded[:whole]), endpoint)


def _n_frames(audio: np.ndarray) -> int:
    return -(-(len(audio) + int(TAIL_S * SAMPLE_RATE)) // VAD_FRAME)


def _loop_row(stages: Stages, audio: np.ndarray, lo: LoopOptions, reference: dict | None) -> dict:
    """The loop on ``audio``; scored against ``reference`` (the clean run's row; None: this is it)."""
    traces, drops = run_loop(stages, audio, lo)
    spans = [(t.start_sample, t.end_sample) for t in traces]
    said = [(t.start_sample, t.end_sample, t.text) for t in traces if t.text]
    ref_spans = spans if reference is None else reference["spans"]
    n = _n_frames(audio)
    row = {
        "spans": spans,
        "text": " ".join(t.text for t in traces if t.text).strip(),
        "utterances": len(traces),
        "end_reasons": [t.end_reason for t in traces],
        "split": sum(t.split for t in traces),  # utterances said from their pieces (LoopOptions.split)
        "lent": sum(t.lent for t in traces),  # utterances said with a dropped one's audio (ContextOptions.lend_within_s)
        "langs": sorted({t.lang for t in traces if t.lang}),
        "invented": [u[2] for u in invented(said, ref_spans)],
        "drops": drops.reasons,
        "gated": drops.gated,
        "turn_latency_ms": [round(t.turn_latency_ms, 1) for t in traces if t.turn_latency_ms is not None],
        "vad": vad_counts(frames_of(ref_spans, n), frames_of(spans, n)),
    }
    row["empty"] = not has_words(row["text"])
    return row


def _peer_row(peer, audio: np.ndarray, lang: str | None, reference_spans: Sequence[Span]) -> dict:
    segs = [(int(a * SAMPLE_RATE), int(b * SAMPLE_RATE), t) for a, b, t in peer.segments(audio, lang)]
    text = " ".join(t for _, _, t in segs if t).strip()
    return {"text": text, "empty": not has_words(text),
            "invented": [u[2] for u in invented(segs, reference_spans)]}


def _summary(rows: list[dict], peer: bool) -> dict:
    out: dict = {"mixes": len(rows), "vad_endpointer": None}
    ep = [r["vad_endpointer"] for r in rows if r["vad_endpointer"] is not None]
    if ep:
        tp, fp, fn = (sum(c[i] for c in ep) for i in range(3))
        out["vad_endpointer"] = {**f1(tp, fp, fn), "tp": tp, "fp": fp, "fn": fn}
    asr = [r for r in rows if "loop" in r]
    if not asr:
        return out
    tp, fp, fn = (sum(r["loop"]["vad"][i] for r in asr) for i in range(3))
    out["vad"] = {**f1(tp, fp, fn), "tp": tp, "fp": fp, "fn": fn}
    en = [r for r in asr if r["lang"] == WER_LANG]
    drops: dict[str, int] = {}
    for r in asr:
        for d in r["loop"]["drops"]:
            drops[d] = drops.get(d, 0) + 1
    lat = percentiles((x for r in asr for x in r["loop"]["turn_latency_ms"]), qs=(50, 95))
    out["loop"] = {
        "mixes": len(asr),
        "wer": _r(100 * wer([r["reference"] for r in en], [r["loop"]["text"] for r in en]), 2) if en else None,
        "empty": sum(r["loop"]["empty"] for r in asr),
        "invented": sum(len(r["loop"]["invented"]) for r in asr),
        "turn_latency_ms": {k: _r(v, 0) for k, v in lat.items()},
        "drops": dict(sorted(drops.items())),
        "other_language_utterances": sum(sum(1 for g in r["loop"]["langs"] if g != r["lang"]) for r in asr),
    }
    peer_rows = [r for r in asr if "peer" in r]  # the peer runs once per mix: on the first front-end setting's rows
    if peer and peer_rows:
        peer_en = [r for r in peer_rows if r["lang"] == WER_LANG]
        out["peer"] = {
            "wer": _r(100 * wer([r["reference"] for r in peer_en], [r["peer"]["text"] for r in peer_en]), 2)
            if peer_en else None,
            "empty": sum(r["peer"]["empty"] for r in peer_rows),
            "invented": sum(len(r["peer"]["invented"]) for r in peer_rows),
        }
        if peer_en:
            out["loop_minus_peer"] = wer_difference(peer_en)
    return out


def wer_difference(rows: Sequence[dict]) -> dict:
    """The loop's WER minus the peer's on the same mixes, in points, with a 95 % interval: a paired
    bootstrap over mixes (the build gates' edit counts and statistics, ``gate.word_edits`` and
    :func:`~edge_rt.build.calibration.stats.paired_ratio`, fixed seed). With 12 clips a condition holds ~200 words, and Whisper in noise gets whole clips
    right or wrong, so a difference of several points can be chance; the interval says how much."""
    from edge_rt.build.calibration.gate import word_edits
    from edge_rt.build.calibration.stats import paired_ratio

    refs = [r["reference"] for r in rows]
    loop, words = word_edits(refs, [r["loop"]["text"] for r in rows])
    peer, _ = word_edits(refs, [r["peer"]["text"] for r in rows])
    d = paired_ratio(peer, loop, words)
    return {"wer_points": _r(100 * d.delta, 2), "ci95": [_r(100 * d.low, 2), _r(100 * d.high, 2)],
            "mixes": d.items, "words": d.total}


def noise_clips(options: NoiseEvalOptions) -> tuple[list[dict], dict[str, np.ndarray]]:
    """The chosen clips (manifest entries) and every clip's audio by id (the babble pool)."""
    from edge_rt.measure.bench import BenchOptions, load_clips

    every = load_clips(BenchOptions(pack=options.pack, speech_dir=options.speech_dir))
    pool = {c["id"]: read_audio(c["path"]) for c in every}
    chosen = load_clips(BenchOptions(pack=options.pack, clips=options.clips, speech_dir=options.speech_dir))
    langs = set(options.asr_langs) | (set(options.vad_langs) if options.vad_langs is not None
                                       else {c["lang"] for c in chosen})
    picked: list[dict] = []
    for lang in sorted(langs):
        of_lang = [c for c in chosen if c["lang"] == lang]
        picked += of_lang[: options.limit] if options.limit else of_lang
    return picked, pool


class _Runner:
    """Stages, the peer and the per-clip clean references of one evaluation."""

    def __init__(self, stages: Stages, peer, options: NoiseEvalOptions):
        self.stages, self.peer, self.options = stages, peer, options
        self._clean: dict = {}  # (clip id, front end) -> the clean run's row, for the clip being mixed

    def _lo(self, clip: dict, frontend: str) -> LoopOptions:
        from edge_rt.measure.bench import BenchOptions

        o = self.options
        return loop_options(BenchOptions().target_for(clip["lang"]), clip["lang"] if o.given_language else None,
                            o, frontend)

    def decoded(self, clip: dict) -> bool:
        return clip["lang"] in self.options.asr_langs and clip["lang"] in self.stages.asr.languages

    def clean_rows(self, clip: dict, clean: np.ndarray) -> list[dict]:
        """The clip's clean runs (one per front end), kept as the references of its mixes."""
        if self._clean and next(iter(self._clean))[0] != clip["id"]:
            self._clean.clear()  # mixes come clip by clip (noisy_mixes' order): keep one clip's
        rows = []
        for fe in self.options.frontends:
            lo = self._lo(clip, fe)
            loop = _loop_row(self.stages, clean, lo, None)
            loop["endpointer_spans"] = ref_ep = offline_spans(self.stages.vad, clean, lo.endpoint)
            self._clean[(clip["id"], fe)] = loop
            row = self._row(clip, "clean", None, fe, loop, ref_ep, ref_ep)
            if self.peer is not None:
                row["peer"] = _peer_row(self.peer, clean, self._peer_lang(clip), loop["spans"])
            rows.append(row)
        return rows

    def mix_rows(self, clip: dict, m: NoisyMix) -> list[dict]:
        rows = []
        for fe in self.options.frontends if self.decoded(clip) else ("off",):
            lo = self._lo(clip, fe)
            ref = self._clean.get((clip["id"], fe))
            if ref is None:  # not decoded: the endpointer-only reference
                ref = {"endpointer_spans": offline_spans(self.stages.vad, m.clean, lo.endpoint)}
                self._clean[(clip["id"], fe)] = ref
            heard = m.audio if self.options.enhance is None else self.options.enhance(m.audio)
            # The endpointer-only figure is kept for runs without a front end only (see _row).
            hyp_ep = offline_spans(self.stages.vad, heard, lo.endpoint) if fe == "off" else []
            loop = _loop_row(self.stages, heard, lo, ref) if self.decoded(clip) else None
            row = self._row(clip, m.kind, m.snr_db, fe, loop, ref["endpointer_spans"], hyp_ep)
            if self.peer is not None and loop is not None and fe == self.options.frontends[0]:
                row["peer"] = _peer_row(self.peer, m.audio, self._peer_lang(clip), ref["spans"])
            rows.append(row)
        return rows

    def _peer_lang(self, clip: dict) -> str | None:
        return clip["lang"] if self.options.given_language else None

    def _row(self, clip, kind, snr, fe, loop, ref_ep, hyp_ep) -> dict:
        end = max([b for _, b in ref_ep + hyp_ep] + [1])
        frames = -(-end // VAD_FRAME)
        row = {"id": f"{clip['id']}/{kind}" + ("" if snr is None else f"/{snr:g}dB"), "clip": clip["id"],
               "lang": clip["lang"], "kind": kind, "snr_db": snr, "frontend": fe,
               # offline, without the front end: only for runs without one
               "vad_endpointer": (vad_counts(frames_of(ref_ep, frames), frames_of(hyp_ep, frames))
                                  if fe == "off" else None)}
        if loop is not None:
            row["reference"] = clip["text"]
            row["loop"] = loop
        return row


def evaluate_noise(options: NoiseEvalOptions, log: Callable[[dict], None] = lambda row: None) -> dict:
    """Every chosen clip clean, then x noise kind x SNR; per-run rows and a summary per (front end, kind, SNR)."""
    from edge_rt.pack import BuiltPack
    from edge_rt.pipeline import StageOptions, load_stages

    for fe in options.frontends:
        loop_options("en", None, options, fe)  # a bad front end or override fails before anything loads
    clips, pool = noise_clips(options)
    pack = BuiltPack.load(options.pack)
    stages = load_stages(pack, StageOptions(precision=options.precision, threads=options.threads,
                                            backend=options.backend))
    peer = None
    if options.peer:
        from edge_rt.measure.peer import PeerStack

        peer = PeerStack.load(pack, stages, options.threads)
    runner = _Runner(stages, peer, options)
    speech = {c["id"]: pool[c["id"]] for c in clips}
    if options.paused is not None:  # hesitations: the clips' paused versions (the babble pool stays as recorded)
        paused = {cid: paused_clip(cid, audio, stages.vad, options.paused) for cid, audio in speech.items()}
        speech = {cid: p.audio for cid, p in paused.items() if p is not None}
        clips = [c for c in clips if c["id"] in speech]
    by_id = {c["id"]: c for c in clips}
    rows: list[dict] = []
    current = None
    for m in noisy_mixes(speech, pool, options.noise):
        c = by_id[m.clip_id]
        if not runner.decoded(c) and options.vad_langs is not None and c["lang"] not in options.vad_langs:
            continue
        new = []
        if m.clip_id != current and runner.decoded(c):
            new += runner.clean_rows(c, m.clean)
        current = m.clip_id
        new += runner.mix_rows(c, m)
        for row in new:
            rows.append(row)
            log(row)
    summary = []
    for fe in options.frontends:
        for kind, snrs in (("clean", (None,)), *((k, options.noise.snrs_db) for k in options.noise.kinds)):
            for snr in snrs:
                group = [r for r in rows if r["frontend"] == fe and r["kind"] == kind and r["snr_db"] == snr]
                if group:
                    summary.append({"frontend": fe, "kind": kind, "snr_db": snr, **_summary(group, options.peer)})
    return {"pack": options.pack, "precision": options.precision, "peer": options.peer,
            "given_language": options.given_language, "frontends": list(options.frontends),
            "paused": None if options.paused is None else dataclasses.asdict(options.paused),
            "loop_overrides": [[k, repr(v)] for k, v in options.loop_overrides],
            "noise": dataclasses.asdict(options.noise), "clips": [c["id"] for c in clips],
            "summary": summary, "mixes": rows}
