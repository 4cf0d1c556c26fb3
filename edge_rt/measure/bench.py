"""``edge-rt bench``: turn latency of the live loop on real speech, against a serial pipeline.

Each clip is replayed at real-time pace through the full loop (paced file
source → loop → paced playback sink), followed by silence. The end of speech
is an **offline oracle** computed once per clip: the end of the last 32 ms
frame whose Silero probability (the whole clip run through the VAD, no
endpointing) is ≥ 0.5. Turn latency = time the first translated sample of the
utterance holding that end reaches the (simulated) device − the capture time of
the oracle end.

The **serial baseline** is what a user assembles from the same models: wait
for 500 ms of silence after the oracle end, then transcribe the whole clip with
a 30 s Whisper window, translate, and synthesize the whole translation before
playing it; its latency is 500 ms + that compute, measured in the same run.
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import PacedFileSink
from edge_rt.audio.sources import PacedFileSource
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.loop.stages import StageOptions, Stages
from edge_rt.pack import BuiltPack
from edge_rt.loop.trace import UtteranceTrace, percentiles
from edge_rt.units import SAMPLE_RATE, VAD_FRAME

BASELINE_SILENCE_MS = 500  # the serial pipeline's end-of-turn silence (OpenAI Realtime's default)
ORACLE_THRESHOLD = 0.5
STAGES = ("endpoint_wait", "asr_final", "mt", "tts_first_chunk", "playback")


@dataclass(frozen=True)
class BenchOptions:
    pack: str = "default"
    precision: str = "int8"
    threads: int = 2
    clips: tuple[str, ...] = ()  # clip ids from manifest.jsonl; empty = all
    limit: int | None = None  # at most this many clips
    tail_s: float = 2.5  # silence after each clip
    baseline: bool = True
    speech_dir: Path | None = None
    partials: bool = True  # live captions (costs compute during speech)
    # Decode + translate + synthesize ahead once a pause is this long (None: no speculation).
    speculate_after_ms: int | None = LoopOptions.speculate_after_ms
    early_commit: bool = False  # end at a complete sentence instead of waiting the whole hangover

    def loop_options(self, target: str) -> LoopOptions:
        return LoopOptions(target=target, partials=self.partials, speculate_after_ms=self.speculate_after_ms,
                           early_commit=self.speculate_after_ms is not None and self.early_commit)

    def target_for(self, lang: str) -> str:
        """English clips are spoken in Portuguese, every other language in English."""
        return "pt" if lang == "en" else "en"


@dataclass
class ClipResult:
    id: str
    lang: str
    target: str
    duration_s: float
    oracle_end_s: float
    turn_latency_ms: float | None
    baseline_latency_ms: float | None
    stages_ms: dict[str, float | None]
    utterances: int
    text: str
    translation: str
    traces: list[UtteranceTrace] = field(repr=False, default_factory=list)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "traces"}


def speech_dir_default() -> Path:
    from edge_rt.pack import repo_root

    env = os.environ.get("EDGE_RT_SPEECH")
    return Path(env) if env else repo_root().parent / "shared" / "data" / "speech"


def load_clips(options: BenchOptions) -> list[dict]:
    folder = options.speech_dir or speech_dir_default()
    manifest = folder / "manifest.jsonl"
    if not manifest.is_file():
        from edge_rt.errors import AudioInputError

        raise AudioInputError(f"the speech set is missing: {manifest}; pass --speech-dir or set EDGE_RT_SPEECH")
    clips = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    if options.clips:
        wanted = set(options.clips)
        unknown = wanted - {c["id"] for c in clips}
        if unknown:
            from edge_rt.errors import AudioInputError

            raise AudioInputError(f"unknown clip id(s) {sorted(unknown)}; see {manifest}")
        clips = [c for c in clips if c["id"] in wanted]
    for c in clips:
        c["path"] = folder / c["audio"]
    return clips[: options.limit] if options.limit else clips


def oracle_end(vad, audio: np.ndarray) -> int:
    """Sample index one past the last frame the VAD scores as speech (>= 0.5) over the whole clip."""
    probs = vad.probabilities(audio)
    speech = np.flatnonzero(probs >= ORACLE_THRESHOLD)
    return int((speech[-1] + 1) * VAD_FRAME) if speech.size else len(audio)


def run_clip(stages: Stages, audio: np.ndarray, options: LoopOptions, tail_s: float
             ) -> tuple[list[UtteranceTrace], PacedFileSource]:
    source = PacedFileSource(audio, tail_s=tail_s)
    sink = PacedFileSink(stages.tts.sample_rate(options.target))
    loop = Loop(stages, source, sink, options)
    traces = loop.run()
    return traces, source


def serial_baseline(stages: Stages, asr30, audio: np.ndarray, end: int, target: str) -> float:
    """500 ms silence wait + whole-clip ASR (30 s window) + MT + full TTS, in ms."""
    t0 = time.perf_counter()
    first = asr30.transcribe(audio[: end], language=None)
    route = stages.route(first.language, target)
    text = first.text
    if route.asr_task == "translate":
        text = asr30.transcribe(audio[: end], language=first.language, task="translate").text
    if route.mt_pair and text:
        text = stages.mt.translate(text, *route.mt_pair)
    if text:
        stages.tts.synthesize(text, target)
    return BASELINE_SILENCE_MS + (time.perf_counter() - t0) * 1000


def _turn(traces: list[UtteranceTrace], clock, end: int) -> tuple[float | None, UtteranceTrace | None]:
    """Latency of the utterance that holds the oracle end of speech."""
    spoken = [t for t in traces if "first_output" in t.t_ns and t.start_sample <= end + VAD_FRAME]
    if not spoken:
        return None, None
    last = spoken[-1]
    latency = (last.t_ns["first_output"] - clock.ns(end)) / 1e6
    if latency < 0:
        # The translation started before the oracle's end of speech: the last sound the VAD scored
        # as speech (a breath, trailing noise) became no utterance of its own. No turn to measure.
        return None, last
    return latency, last


def cold_start_s() -> float:
    """Seconds since this process started (for 'process start → ready to listen')."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def bench(options: BenchOptions, log=lambda m: None) -> dict:
    pack = BuiltPack.load(options.pack)
    stages = Stages.load(pack, StageOptions(precision=options.precision, threads=options.threads))
    cold = cold_start_s()
    clips = load_clips(options)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    base_stages = asr30 = None
    if options.baseline:
        from edge_rt.stages.asr.whisper import AsrOptions

        base_stages = stages if options.precision == "fp32" else Stages.load(pack, StageOptions("fp32", options.threads))
        asr30 = base_stages.asr.with_options(AsrOptions(precision="fp32", threads=options.threads, bucket_s=30))
    results: list[ClipResult] = []
    for c in clips:
        audio = read_audio(c["path"])
        target = options.target_for(c["lang"])
        end = oracle_end(stages.vad, audio)
        traces, source = run_clip(stages, audio, options.loop_options(target), options.tail_s)
        latency, tr = _turn(traces, source.clock, end)
        base = serial_baseline(base_stages, asr30, audio, end, target) if options.baseline else None
        spoken = [t for t in traces if t.translation]
        res = ClipResult(c["id"], c["lang"], target, round(len(audio) / SAMPLE_RATE, 2), round(end / SAMPLE_RATE, 3),
                         latency, base, tr.stages_ms() if tr else {s: None for s in STAGES}, len(spoken),
                         " ".join(t.text for t in spoken), " ".join(t.translation for t in spoken), traces)
        results.append(res)
        log(res)
    wall = time.perf_counter() - wall0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    lat = percentiles(r.turn_latency_ms for r in results)
    base = percentiles((r.baseline_latency_ms for r in results), qs=(50, 95))
    stages_pct = {s: percentiles(r.stages_ms.get(s) for r in results) for s in STAGES}
    return {
        "pack": options.pack,
        "precision": options.precision,
        "turn_latency_ms": lat,
        "baseline_turn_latency_ms": base,
        "speedup_p50": (base["p50"] / lat["p50"]) if options.baseline and lat["p50"] and base["p50"] else None,
        "stages_ms": stages_pct,
        "rss_mb_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cold_start_s": round(cold, 3),
        "cpu_percent": round(100 * cpu / wall, 1) if wall else None,
        # no turn latency: nothing was spoken, or the VAD's last speech frame (trailing noise) came after
        # the last translation had started (see _turn)
        "missed": [r.id for r in results if r.turn_latency_ms is None],
        "loop": {"partials": options.partials, "speculate_after_ms": options.speculate_after_ms,
                 "early_commit": options.early_commit},
        "oracle": f"end of the last 32 ms frame with Silero p >= {ORACLE_THRESHOLD} over the whole clip",
        "baseline": f"{BASELINE_SILENCE_MS} ms silence + whole clip, Whisper 30 s window, FP32, full-sentence TTS",
        "clips": [r.as_dict() for r in results],
    }


# -- perf-regression check ------------------------------------------------------------
CHECK_TOLERANCE = 0.25  # fail when live/serial P50 grows by more than this fraction


def latency_ratio(result: dict) -> float:
    """Live turn-latency P50 over the serial baseline's P50, measured in the same run."""
    live, base = result["turn_latency_ms"]["p50"], result["baseline_turn_latency_ms"]["p50"]
    if not live or not base:
        from edge_rt.errors import EdgeRtError

        raise EdgeRtError("the bench produced no latency (missed every clip, or ran without the baseline)")
    return live / base


def check_regression(result: dict, recorded: dict) -> tuple[bool, str]:
    """Compare this run's ratio with the recorded one; (ok, message)."""
    ratio = latency_ratio(result)
    limit = recorded["ratio_p50"] * (1 + recorded.get("tolerance", CHECK_TOLERANCE))
    ok = ratio <= limit
    msg = (f"live/serial turn-latency P50 ratio {ratio:.3f} (recorded {recorded['ratio_p50']:.3f}, "
           f"limit {limit:.3f}): {'ok' if ok else 'REGRESSION'}")
    return ok, msg


def record_check(result: dict, clips: list[str], path: str | Path) -> dict:
    from edge_rt.atomic import atomic_write

    data = {"clips": clips, "pack": result["pack"], "precision": result["precision"],
            "ratio_p50": round(latency_ratio(result), 4), "tolerance": CHECK_TOLERANCE,
            "turn_latency_p50_ms": result["turn_latency_ms"]["p50"],
            "baseline_p50_ms": result["baseline_turn_latency_ms"]["p50"]}
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(data, indent=2) + "\n"))
    return data
