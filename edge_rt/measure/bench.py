"""``edge-rt bench``: turn latency of the live loop on real speech, against a serial pipeline and a peer stack.

Each clip is replayed at real-time pace through the full loop (paced file
source → loop → paced playback sink), followed by silence. The end of speech
is an **offline oracle** computed once per clip: the end of the last 32 ms
frame whose Silero probability (the whole clip run through the VAD, no
endpointing) is ≥ 0.5. Turn latency = time the first sounding translated sample
(loop/onset.py) of the utterance holding that end reaches the (simulated) device − the capture time of
the oracle end.

A clip **fails** when the utterance holding the oracle end produced no speech
(dropped, unrecognised, a stage error): it is listed in ``failed`` and never
replaced by an earlier utterance's latency. A clip whose spoken translation
started before the oracle end (the VAD's last "speech" frame was trailing noise
that became no utterance) has no turn to measure and is listed in ``early``.

The **serial baseline** (:mod:`edge_rt.measure.serial`) runs the loop's own
engines one after the other on the whole utterance; ``--peer``
(:mod:`edge_rt.measure.peer`) runs faster-whisper + the same MT + Piper/espeak.
Both are measured in the same run, on the same clips, from the same oracle end, to
the first sound of their reply as the loop is (they play their first chunk's lead
of near-silence, ``lead_ms``; the loop starts where it sounds).

Turn-taking (:mod:`edge_rt.measure.turn_taking`): per clip, whether a translation
started playing before the final end of speech (talk-over), how long the
translation ran past it (finish lag), and the error rate of the live "final"
captions against the reference. With ``paused`` set, the same run is repeated on
the paused-speech set (:mod:`edge_rt.measure.paused`: a word-search pause
inserted inside each sentence), without the baselines.
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from edge_rt.audio.files import read_audio
from edge_rt.audio.echo_path import EchoPath, LoopBack
from edge_rt.audio.sinks import PacedFileSink, PlaybackTap
from edge_rt.audio.sources import PacedFileSource
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.loop.options import RedecodeOptions, SplitOptions, loudspeaker_mode
from edge_rt.loop.preroll import NoisyPrerollOptions, SoundStartOptions
from edge_rt.loop.stages import Stages
from edge_rt.loop.trace import UtteranceTrace, percentiles
from edge_rt.loop.turn_policy import TurnOptions
from edge_rt.measure.memory import cold_start_s
from edge_rt.measure.oracle import OracleOptions, speech_span
from edge_rt.measure.paused import PausedClip, PauseOptions, paused_clip, room_tone
from edge_rt.measure.serial import serial_turn
from edge_rt.measure.slowdown import Slowdown
from edge_rt.measure.targets import judge
from edge_rt.measure.turn_taking import CaptionLog, TurnTaking, live_error_rates, turn_taking, turn_taking_summary
from edge_rt.pack import BuiltPack
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.units import SAMPLE_RATE, VAD_FRAME

STAGES = ("endpoint_wait", "asr_final", "mt", "tts_first_chunk", "playback")


@dataclass(frozen=True)
class BenchOptions:
    pack: str = "default"
    precision: str = "int8"
    threads: int = 2
    backend: str = "auto"  # "cpu" | "tensorrt" | "auto": what runs the engines (edge_rt/backends/factory.py)
    clips: tuple[str, ...] = ()  # clip ids from manifest.jsonl; empty = all
    limit: int | None = None  # at most this many clips
    tail_s: float = 2.5  # silence after each clip
    baseline: bool = True  # the serial pipeline (same engines, one stage after the other)
    peer: bool = False  # also the package stack: faster-whisper + same MT + Piper/espeak (dev extra)
    peer_wait_ms: float | None = None  # the peer's end-of-speech wait (None: faster-whisper's VAD default)
    live: bool = True  # run the real-time loop (False: only the serial pipeline and the speed check)
    speed_repeats: int = 0  # > 0: time each stage (fastest of N) against the speed probe (perf_check.py)
    slowdown: str = ""  # TEST HOOK ONLY: "asr=2", "all=2" ... (see slowdown.py; EDGE_RT_BENCH_SLOWDOWN)
    speech_dir: Path | None = None
    partials: bool = True  # live captions (costs compute during speech)
    # Decode + translate + synthesize ahead once a pause is this long (None: no speculation).
    speculate_after_ms: int | None = LoopOptions.speculate_after_ms
    paused: PauseOptions | None = None  # also run the paused-speech set (paused.py) built with these options
    turn_policy: bool = True  # end complete sentences early, hold through hesitations (False: the plain hangover)
    turn: TurnOptions = field(default_factory=TurnOptions)  # the policy's knobs when turn_policy is on
    # The loop's own memory and cold start, in a fresh process that loads what `edge-rt run --to pt` loads
    # and translates the first few clips twice (measure/memory.py): this process also holds the serial
    # baseline and the peer, so its own peak RSS is not the loop's.
    memory: bool = False
    # The memory pass translates the first memory_clips clips and the memory_long longest (their 30-s Whisper
    # windows set the encoder's arena: 532 MB on the first 4 alone, 580-612 MB with the 3 longest).
    memory_clips: int = 4
    memory_long: int = 3
    beam_size: int = 1  # the loop's beam search for the text it translates (LoopOptions.beam_size)
    # an unsure greedy decode decoded again with a beam (LoopOptions.redecode; None: greedy only)
    redecode: RedecodeOptions | None = field(default_factory=RedecodeOptions)
    # a transcript too sparse for its utterance decoded again in pieces (LoopOptions.split; None: never)
    split: SplitOptions | None = field(default_factory=SplitOptions)
    # an utterance that opens out of noise starts further back (LoopOptions.noisy_preroll; None: never)
    noisy_preroll: NoisyPrerollOptions | None = field(default_factory=NoisyPrerollOptions)
    # out of a quiet room, a pre-roll never starts inside a sound (LoopOptions.sound_start; None: never)
    sound_start: SoundStartOptions | None = field(default_factory=SoundStartOptions)
    # Also each clip in loudspeaker mode (loop.options.loudspeaker_mode: `edge-rt run --loudspeaker`'s capture front
    # end and barge-in), run right after the same clip without it, so the two see the same load: what the
    # mode costs in turn latency as paired ratios (the target is 10 %, README), talk-over and live WER.
    loudspeaker: bool = False
    # The loudspeaker runs' echo path (audio/echo_path.py): the sink's playback fed back into the capture, 6 dB down
    # and 40 ms late, as in the live test (tests/loop/test_loudspeaker_jack.py). None: no echo (before 2026-12-06:
    # then AEC3 never hears its loudspeaker and the ready tone cannot train it).
    loudspeaker_echo: EchoPath | None = field(default_factory=EchoPath)
    # With `loudspeaker` and `peer`: the loudspeaker runs go on this long after each clip (instead of tail_s), and the
    # package stack answers the clip beside the same loudspeaker as long (measure/peer_echo.py), so that each stack's
    # replies come back into its microphone: turns made of its own voice, for both. 15 s holds the loop's whole reply
    # (finish lag P95 ~11.7 s here) and the stack's first one with the 2 s it waits after it.
    echo_window_s: float = 15.0
    # Every live run starts its clip after LOUDSPEAKER_LEAD of silence, as a person speaks to a loop that has been
    # listening (always with `loudspeaker`). Off by default: the figures since issue 5 start the clip at the
    # stream's first sample, and are kept comparable. On the 33 clips (2026-12-06, `bench --no-baseline` without and
    # with it, one after the other): live English WER 6.98 against 5.12 %, turn latency P50 520 / 560 ms, per-clip
    # median x0.99. Three clips make the WER gap, the same three in every run with and without a lead that day
    # ("Stuff it" heard "Stuffed", "wrestlers" "restors", "3 to 2" "free to 2"). It is Silero's state, not a cut
    # word: after a second of digital silence (or white noise at -75/-60 dBFS) it scores the soft onset of
    # 1089-134686-0001's "Stuff" 0.78-0.98 instead of 0.20-0.39, so the utterance opens 224 ms earlier (luna: 64 ms);
    # after a second of the clip's own room tone it does not. A live room gives room tone: the lower WER is this
    # silence's, not a room's.
    lead: bool = False
    # The lead and the tail after each clip are the clip's own room tone (measure/paused.room_tone: its quietest
    # 200 ms, tiled), not digital silence: a microphone in a room never hands out zeros, and Silero's state after
    # zeros is not its state after room tone (see `lead`). Off by default: the figures so far had zeros. With it and
    # the lead (2026-12-06, 33 clips): live English WER 8.37 % (en_fleurs_1846 heard "the vying by 12"), per-clip
    # turn latency x0.997 against the plain run's.
    room_tone: bool = False

    @property
    def loudspeaker_tail_s(self) -> float:
        """How long the loudspeaker runs (and, with ``peer``, the package stack's) go on after each clip."""
        return max(self.tail_s, self.echo_window_s) if self.peer else self.tail_s

    @property
    def lead_in(self) -> bool:
        """Live runs start their clip after LOUDSPEAKER_LEAD (``lead``, and always with ``loudspeaker``)."""
        return self.lead or self.loudspeaker

    def loop_options(self, target: str) -> LoopOptions:
        return LoopOptions(target=target, partials=self.partials, speculate_after_ms=self.speculate_after_ms,
                           turn=self.turn if self.turn_policy else None, beam_size=self.beam_size,
                           redecode=self.redecode, split=self.split, noisy_preroll=self.noisy_preroll,
                           sound_start=self.sound_start)

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
    status: str  # "ok" | "failed" (the last utterance was not spoken) | "early" (no turn to measure) | "not run"
    reason: str  # why it failed / has no turn ("" when ok)
    turn_latency_ms: float | None
    serial_ms: float | None
    peer_ms: float | None
    stages_ms: dict[str, float | None]
    utterances: int
    text: str
    translation: str
    serial: dict | None = None  # the serial turn's parts (wait, asr, mt, tts ms)
    peer: dict | None = None
    reference: str = ""  # the manifest transcript
    live_text: str = ""  # the live loop's "final" captions, joined
    turn_taking: dict | None = None  # turn_taking.TurnTaking.as_dict() (None: the live loop did not run)
    pauses: dict | None = None  # the paused set: where the pauses are (PausedClip.as_dict())
    phrase_cache: dict | None = None  # the live loop's phrase cache (LiveRun.phrases)
    partials_stopped: int = 0  # partial captions stopped because a pause began (loop/pause_watch.py)
    redecoded: int = 0  # decodes whose words came from the beam after an unsure greedy decode (LoopOptions.redecode)
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


_ORACLE = OracleOptions()  # the oracle end of speech (measure/oracle.py)


def oracle_end(vad, audio: np.ndarray) -> int:
    """Sample index one past the VAD's last speech region over the whole clip (:mod:`edge_rt.measure.oracle`:
    frames at p >= 0.5, gaps under 100 ms closed, regions under 250 ms dropped); the clip's end if it has none."""
    span = speech_span(vad.probabilities(audio), len(audio), _ORACLE)
    return span[1] if span is not None else len(audio)


def load_bench_stages(options: BenchOptions) -> tuple[BuiltPack, Stages]:
    """The pack and its stages (with the test-only slowdown applied): the bench's one construction point."""
    pack = BuiltPack.load(options.pack)
    stages = load_stages(pack, StageOptions(precision=options.precision, threads=options.threads,
                                            backend=options.backend))
    slow = Slowdown.parse(options.slowdown)
    if slow:
        stages = Stages(*(slow.stage(n, getattr(stages, n)) for n in ("vad", "asr", "mt", "tts")),
                        backend=stages.backend)
    return pack, stages


class PlayoutSink(PacedFileSink):
    """A paced sink that also notes when the last translated sample was played (for the finish lag).

    Samples written before the first utterance's mark (the ready tone) are not translated speech. With
    ``echo_tap`` it also records what it plays in a second tap, for an echo path (audio/echo_path.py).
    """

    last_played_ns: int | None = None

    def __init__(self, rate: int, block: int | None = None, echo_tap: bool = False):
        super().__init__(rate, block)
        self.echo_tap = PlaybackTap(rate) if echo_tap else None
        self._speech_from: int | None = None  # ring index of the first translated sample

    def mark(self, on_first_output) -> None:
        if self._speech_from is None:
            self._speech_from = self.ring.written
        super().mark(on_first_output)

    def consume(self, out: np.ndarray, t_ns: int) -> None:
        before = self.ring.read_index
        super().consume(out, t_ns)
        if self.echo_tap is not None:
            self.echo_tap.record(out, t_ns)
        after = self.ring.read_index  # out[: after - before] are real samples, the rest underrun silence
        if self._speech_from is not None and after > max(before, self._speech_from):  # translated speech
            self.last_played_ns = t_ns + (after - before - 1) * 1_000_000_000 // self.rate


@dataclass
class LiveRun:
    """What one clip's live run left behind: traces, the capture clock, captions, the last sample played."""

    traces: list[UtteranceTrace]
    clock: object  # the source's CaptureClock
    captions: CaptionLog
    last_played_ns: int | None
    phrases: dict | None = None  # the loop's phrase cache: lookups, hits, saved time (CacheStats.as_dict())
    partials_stopped: int = 0  # Loop.partials_stopped
    redecoded: int = 0  # Loop.redecoded
    lead: int = 0  # samples of silence the clip was captured after: its sample i is capture index lead + i
    frontend_ms_per_hop: float | None = None  # the capture front end's time per 32-ms hop on the worker (None: none)

    def turn(self, end: int) -> Turn:
        """The live turn (:func:`live_turn`) at the clip's sample ``end``."""
        return live_turn(self.traces, self.clock, end + self.lead)

    def own_voice(self, end: int) -> list[UtteranceTrace]:
        """Utterances translated that began after the clip's last speech (its sample ``end``): only the clip's own
        trailing room noise, the silent tail and the loop's playback sound there, so they are its own voice heard back
        (or text invented from that room noise, as much an error)."""
        return [t for t in self.traces if t.start_sample > end + self.lead + VAD_FRAME and t.translation]

    def taking(self, end: int, pauses=()) -> TurnTaking:
        """Talk-over and finish lag (:func:`turn_taking`) at the clip's sample ``end``, its pauses in clip samples."""
        return turn_taking(self.traces, self.clock, end + self.lead, self.last_played_ns,
                           [(a + self.lead, b + self.lead) for a, b in pauses])


# In loudspeaker mode a clip starts this long after the loop (its ready tone, 0.5 s, then quiet): a kiosk's service
# has started before anyone talks to it. A headset run compared with it (`bench --loudspeaker`, tools/loop_ab.py)
# gets the same lead of silence, and the loudspeaker run's lead is shorter by the stream's lag where nothing of ours
# plays (run_clip; FrontEndOptions.passing_lag: 0 since the capture passes through in time, else the front end's lag),
# so the VAD frames the clip as in the headset run (its 512-sample frames over the same samples of the clip, after as
# much silence) and, where nothing played, the two runs hear the same audio; they differ by the mode, not by where the
# frames fall (with 1.0 s for the loudspeaker run and none for the headset's, fr_fleurs_test_000's utterance opened 384
# samples later than the headset's with nothing played, and its transcript differed).
LOUDSPEAKER_LEAD = 32 * VAD_FRAME  # 1.024 s


def run_clip(stages: Stages, audio: np.ndarray, options: LoopOptions, tail_s: float,
             echo: EchoPath | None = None, lead: bool | None = None, room: bool = False) -> LiveRun:
    """One clip through the live loop at real-time pace; ``echo``: the sink's playback heard by the capture; ``lead``:
    the clip comes after :data:`LOUDSPEAKER_LEAD` of silence (None: with a front end, as in loudspeaker mode);
    ``room``: that lead and the ``tail_s`` after the clip are the clip's own room tone, not digital silence."""
    if lead is None:
        lead = options.frontend is not None
    silence = LOUDSPEAKER_LEAD - (options.frontend.passing_lag if options.frontend is not None else 0) if lead else 0
    if room:
        rng = np.random.default_rng(0)
        fill = lambda n: room_tone(audio, n, PauseOptions(), rng)[0] if n else np.zeros(0, np.float32)  # noqa: E731
        audio = np.concatenate([fill(silence), audio, fill(int(tail_s * SAMPLE_RATE))])
        source = PacedFileSource(audio, tail_s=0.0)
    else:
        source = PacedFileSource(audio, tail_s=tail_s, lead_s=silence / SAMPLE_RATE)
    sink = PlayoutSink(stages.tts.sample_rate(options.target), echo_tap=echo is not None)
    if echo is not None:
        source.echo = LoopBack(sink.echo_tap, echo)
    captions = CaptionLog()
    loop = Loop(stages, source, sink, options, on_caption=captions)
    traces = loop.run()
    fe = loop.frontend
    return LiveRun(list(traces), source.clock, captions, sink.last_played_ns,
                   loop.phrases.stats.as_dict() if loop.phrases is not None else None, loop.partials_stopped,
                   loop.redecoded, silence, fe.busy_ns / 1e6 / fe.hops if fe is not None and fe.hops else None)


@dataclass(frozen=True)
class Turn:
    """The live turn of one clip: its latency, the utterance that holds the end of speech, the verdict."""

    latency_ms: float | None
    trace: UtteranceTrace | None
    status: str  # ok | failed | early
    reason: str = ""


def live_turn(traces: list[UtteranceTrace], clock, end: int) -> Turn:
    """The turn of the utterance that holds the oracle end of speech (the last one that began before it).

    When that utterance produced no speech, the clip failed: an earlier utterance's latency does not
    stand in for it.
    """
    holding = [t for t in traces if t.start_sample <= end + VAD_FRAME]
    if not holding:
        return Turn(None, None, "failed", "no utterance was detected")
    last = holding[-1]
    if "first_output" not in last.t_ns:
        why = last.dropped or "its translation was never played"
        return Turn(None, last, "failed", f"utterance {last.utterance} produced no speech: {why}")
    latency = (last.t_ns["first_output"] - clock.ns(end)) / 1e6
    if latency < 0:
        # The translation started before the oracle's end of speech: the last sound the VAD scored
        # as speech (a breath, trailing noise) became no utterance of its own. No turn to measure.
        return Turn(None, last, "early", f"speech played {-latency:.0f} ms before the oracle end (trailing noise)")
    return Turn(latency, last, "ok")


def _loudspeaker_summary(clips: dict[str, dict], echo: EchoPath | None) -> dict:
    """Per clip, the headset and loudspeaker runs -> the loudspeaker run's percentiles, the paired ratios, and
    its talk-over and live captions' error rates (turn_taking_summary)."""
    both = [(c["headset_ms"], c["loudspeaker_ms"]) for c in clips.values() if c["headset_ms"] and c["loudspeaker_ms"]]
    taking = turn_taking_summary(list(clips.values()))
    return {
        "echo": asdict(echo) if echo is not None else None,
        "turn_latency_ms": percentiles(c["loudspeaker_ms"] for c in clips.values()),
        # both over the clips measured in both runs: the P50s' ratio and the median of the per-clip ratios
        "p50_ratio": _ratio(float(np.median([s for _, s in both])), float(np.median([h for h, _ in both]))) if both else None,
        "per_clip_median_ratio": round(float(np.median([s / h for h, s in both])), 3) if both else None,
        "clips_paired": len(both),
        # the same, over the clips run headset first and over those run loudspeaker first: a run that pays for the
        # one before it shows as a gap between the two
        "per_clip_median_ratio_by_first": {
            first: round(float(np.median(r)), 3) if (r := [c["loudspeaker_ms"] / c["headset_ms"] for c in clips.values()
                                                          if c.get("first") == first and c["headset_ms"]
                                                          and c["loudspeaker_ms"]]) else None
            for first in ("headset", "loudspeaker")},
        "talk_over_rate": taking["talk_over_rate"],
        "live_wer_en": taking["live_wer_en"],
        "live_wer": taking["live_wer"],
        # the capture front end's time per 32-ms hop on the worker, the median over the clips' runs (its cost in
        # front of the VAD: FrontEndOptions.reference_floor_dbfs)
        "frontend_ms_per_hop": round(float(np.median(f)), 3) if (f := [c["frontend_ms_per_hop"] for c in clips.values()
                                                                        if c.get("frontend_ms_per_hop")]) else None,
        # utterances translated after the clip's last speech: the loop's own voice heard back (LiveRun.own_voice)
        "own_voice_turns": sum(len(c.get("own_voice", ())) for c in clips.values()),
        "clips_with_own_voice": sum(bool(c.get("own_voice")) for c in clips.values()),
        # the package stack beside the same loudspeaker (bench --peer, measure/peer_echo.py); None without --peer
        "peer": _peer_echo_summary(clips) if any("peer" in c for c in clips.values()) else None,
        # ... and that stack muting its microphone while it speaks
        "peer_half_duplex": (_peer_echo_summary(clips, "peer_half_duplex")
                             if any("peer_half_duplex" in c for c in clips.values()) else None),
        "clips": {k: {"headset_ms": c["headset_ms"], "loudspeaker_ms": c["loudspeaker_ms"], "live_text": c["live_text"],
                      "talk_over": bool(c["turn_taking"]["talk_over"]), "first": c.get("first"),
                      "own_voice": c.get("own_voice", []), "peer": c.get("peer"),
                      "peer_half_duplex": c.get("peer_half_duplex")}
                  for k, c in clips.items()},
    }


def _peer_echo_summary(clips: dict[str, dict], key: str = "peer") -> dict:
    """The package stack's loudspeaker runs (``key``: "peer", or "peer_half_duplex" for the one that mutes its
    microphone while it speaks): its own voice translated, its turn latency, its English captions' WER (the stretches
    that were not its own voice; English clips are transcribed on every route into Portuguese)."""
    ran = [c[key] | {"lang": c["lang"], "reference": c["reference"]} for c in clips.values() if key in c]
    english = live_error_rates((c["lang"], c["reference"], c["text"]) for c in ran
                               if c["lang"] == "en" and c.get("reference"))
    return {"own_voice_turns": sum(len(c["own_voice"]) for c in ran),
            "clips_with_own_voice": sum(bool(c["own_voice"]) for c in ran),
            "clips": len(ran),
            "turn_latency_ms": percentiles(c["turn_ms"] for c in ran),
            "live_wer_en": english["en"]["value"] if "en" in english else None}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _clip_inputs(stages, c: dict, options: BenchOptions, paused: PausedClip | None = None
                 ) -> tuple[np.ndarray, int, LoopOptions]:
    """A clip's (audio, oracle end of speech, loop options); given ``paused``, its paused version's."""
    audio = paused.audio if paused is not None else read_audio(c["path"])
    end = paused.final_end if paused is not None else oracle_end(stages.vad, audio)
    return audio, end, options.loop_options(options.target_for(c["lang"]))


def _measure_clip(stages, peer, c: dict, options: BenchOptions, inputs: tuple[np.ndarray, int, LoopOptions],
                  paused: PausedClip | None = None) -> ClipResult:
    """One clip (or, given ``paused``, its paused version: no baselines, its own final end) from its
    :func:`_clip_inputs`."""
    audio, end, loop_opts = inputs
    target = loop_opts.target
    turn, traces, taking, live_text, phrases, stopped = Turn(None, None, "not run"), [], None, "", None, 0
    redecoded = 0
    if options.live:
        # beside a loudspeaker run of the clip (bench --loudspeaker): after as much silence as that run
        run = run_clip(stages, audio, loop_opts, options.tail_s, lead=options.lead_in, room=options.room_tone)
        traces, live_text, phrases, stopped = run.traces, run.captions.final_text(), run.phrases, run.partials_stopped
        redecoded = run.redecoded
        turn = run.turn(end)
        taking = run.taking(end, paused.pauses if paused is not None else ()).as_dict()
    if paused is not None:
        peer = None
    serial = serial_turn(stages, audio, end, loop_opts) if options.baseline and paused is None else None
    peer_turn = peer.turn(audio, end, c["lang"], target) if peer is not None else None
    spoken = [t for t in traces if t.translation]
    parts = lambda t: None if t is None else {  # noqa: E731
        "wait_ms": t.wait_ms, "asr_ms": round(t.asr_ms, 1), "mt_ms": round(t.mt_ms, 1), "tts_ms": round(t.tts_ms, 1),
        "lead_ms": round(t.lead_ms, 1)}
    res = ClipResult(
        c["id"], c["lang"], target, round(len(audio) / SAMPLE_RATE, 2), round(end / SAMPLE_RATE, 3),
        turn.status, turn.reason, turn.latency_ms, serial.latency_ms if serial else None,
        peer_turn.latency_ms if peer_turn else None,
        turn.trace.stages_ms() if turn.trace and turn.status == "ok" else {s: None for s in STAGES},
        len(spoken), " ".join(t.text for t in spoken), " ".join(t.translation for t in spoken),
        parts(serial), parts(peer_turn), c.get("text", ""), live_text, taking,
        paused.as_dict() if paused is not None else None, phrase_cache=phrases, partials_stopped=stopped,
        redecoded=redecoded, traces=traces)
    return res


def _loudspeaker_run(stages, options: BenchOptions, inputs: tuple[np.ndarray, int, LoopOptions]) -> LiveRun:
    """The clip's loudspeaker run (bench --loudspeaker) from its :func:`_clip_inputs`."""
    audio, _, loop_opts = inputs
    return run_clip(stages, audio, loudspeaker_mode(loop_opts), options.loudspeaker_tail_s, options.loudspeaker_echo,
                    room=options.room_tone)


def _peer_echo(peer, options: BenchOptions, inputs: tuple[np.ndarray, int, LoopOptions],
               listens_while_speaking: bool = True, replies: dict | None = None) -> dict:
    """The package stack on the clip beside the loudspeaker run's loudspeaker (bench --loudspeaker --peer); with
    ``listens_while_speaking`` False, the same stack muting its microphone while it speaks (half duplex). ``replies``:
    shared by the clip's two runs, so the stretch both hear alike is answered once (peer_echo_run)."""
    from edge_rt.measure.peer_echo import own_voice_turns, peer_echo_run, peer_turn_ms

    audio, end, loop_opts = inputs
    turns = peer_echo_run(peer, audio, end, loop_opts.target, options.loudspeaker_echo, LOUDSPEAKER_LEAD,
                          options.loudspeaker_tail_s, listens_while_speaking=listens_while_speaking, replies=replies)
    return {"turn_ms": peer_turn_ms(turns, LOUDSPEAKER_LEAD, end),
            "own_voice": [t.said for t in own_voice_turns(turns)],
            "text": " ".join(t.heard for t in turns if not t.own_voice).strip(),
            "turns": [t.as_dict() for t in turns]}


def _paused_pass(stages, clips: list[dict], options: BenchOptions, log) -> dict:
    """The live loop on the paused-speech set: latency from the final end, talk-over, finish lag, live WER."""
    results, skipped = [], {}
    for c in clips:
        item = paused_clip(c["id"], read_audio(c["path"]), stages.vad, options.paused)
        if item is None:
            skipped[c["id"]] = f"no word boundary {options.paused.edge_ms} ms inside the speech to pause at"
            continue
        res = _measure_clip(stages, None, c, options, _clip_inputs(stages, c, options, item), item)
        results.append(res)
        log(res)
    failed = [r for r in results if r.status == "failed"]
    clip_dicts = [r.as_dict() for r in results]
    return {
        "options": asdict(options.paused),
        "turn_latency_ms": percentiles(r.turn_latency_ms for r in results),
        "clips_measured": sum(r.turn_latency_ms is not None for r in results),
        **turn_taking_summary(clip_dicts),
        "failed": [r.id for r in failed],
        "failures": {r.id: r.reason for r in failed},
        "early": {r.id: r.reason for r in results if r.status == "early"},
        "skipped": skipped,
        "clips": clip_dicts,
    }


def bench(options: BenchOptions, log=lambda m: None) -> dict:
    pack, stages = load_bench_stages(options)
    cold = cold_start_s()
    clips = load_clips(options)
    peer = None
    if options.peer:
        from edge_rt.measure.peer import PeerStack

        peer = PeerStack.load(pack, stages, options.threads, options.peer_wait_ms)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    results: list[ClipResult] = []
    inputs = []
    loud: dict[str, dict] = {}
    for i, c in enumerate(clips):
        # bench --loudspeaker: each clip in both modes, back to back, every other clip loudspeaker first (a run
        # second after another may pay for the first one's tail; both get the same lead of silence, run_clip)
        first = "loudspeaker" if i % 2 else "headset"
        inp = _clip_inputs(stages, c, options)
        loud_run = _loudspeaker_run(stages, options, inp) if options.loudspeaker and options.live and i % 2 else None
        res = _measure_clip(stages, peer, c, options, inp)
        results.append(res)
        inputs.append(inp)
        log(res)
        if options.loudspeaker and options.live:
            end = inp[1]
            run = loud_run if loud_run is not None else _loudspeaker_run(stages, options, inp)
            loud[c["id"]] = {"headset_ms": res.turn_latency_ms, "loudspeaker_ms": run.turn(end).latency_ms,
                             "id": c["id"], "lang": c["lang"], "reference": c.get("text", ""), "first": first,
                             "live_text": run.captions.final_text(), "turn_taking": run.taking(end).as_dict(),
                             "frontend_ms_per_hop": run.frontend_ms_per_hop,
                             "own_voice": [t.text or t.translation for t in run.own_voice(end)]}
            if peer is not None:  # the package stack beside the same loudspeaker, as long (peer_echo.py)
                replies: dict = {}  # the clip as heard before either stack spoke: decoded once for both
                loud[c["id"]]["peer"] = _peer_echo(peer, options, inp, replies=replies)
                loud[c["id"]]["peer_half_duplex"] = _peer_echo(peer, options, inp, listens_while_speaking=False,
                                                               replies=replies)
    wall = time.perf_counter() - wall0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    phrases = {k: round(sum((r.phrase_cache or {}).get(k, 0) for r in results), 1)
               for k in ("lookups", "hits", "audio_hits", "saved_ms")}
    paused = _paused_pass(stages, clips, options, log) if options.paused is not None and options.live else None
    memory = None
    if options.memory:
        from edge_rt.measure.memory import measure_memory

        longest = sorted(clips, key=lambda c: -sf.info(str(c["path"])).duration)[: options.memory_long]
        chosen = list(dict.fromkeys([c["path"] for c in clips[: options.memory_clips]] + [c["path"] for c in longest]))
        memory = measure_memory(pack.dir, chosen,
                                precision=options.precision, threads=options.threads, target="pt",
                                beam_size=options.beam_size,
                                redecode_beam=options.redecode.beam_size if options.redecode else 0).as_dict()
    speed = None
    if options.speed_repeats:
        from edge_rt.measure.perf_check import measure_speed
        from edge_rt.measure.probe import ProbeOptions, SpeedProbe

        wrap = Slowdown.parse(options.slowdown).wrap_fn("probe")
        probes = {n: SpeedProbe(ProbeOptions(threads=n), wrap=wrap) for n in sorted({1, options.threads})}
        speed = measure_speed(stages, inputs, probes, options.speed_repeats, options.threads)
    lat = percentiles(r.turn_latency_ms for r in results)
    serial = percentiles((r.serial_ms for r in results), qs=(50, 95))
    peer_pct = percentiles((r.peer_ms for r in results), qs=(50, 95))

    def part_pct(kind: str) -> dict:
        rows = [getattr(r, kind) for r in results if getattr(r, kind)]
        return {k: percentiles((row[k] for row in rows), qs=(50, 95)) for k in ("asr_ms", "mt_ms", "tts_ms", "lead_ms")}

    failed = [r for r in results if r.status == "failed"]
    clip_dicts = [r.as_dict() for r in results]
    result = {
        "pack": options.pack,
        "precision": options.precision,
        "backend": stages.backend.name,
        "turn_latency_ms": lat,
        "serial_ms": serial,
        "serial_p50_ms": serial["p50"],
        "serial_parts_ms": part_pct("serial") if options.baseline else None,
        "speedup_vs_serial": _ratio(serial["p50"], lat["p50"]),
        "peer_ms": peer_pct if peer else None,
        "peer_p50_ms": peer_pct["p50"],
        "peer_parts_ms": part_pct("peer") if peer else None,
        "peer_wait_ms": peer.wait_ms if peer else None,
        "speedup_vs_peer": _ratio(peer_pct["p50"], lat["p50"]),
        "stages_ms": {s: percentiles(r.stages_ms.get(s) for r in results) for s in STAGES},
        # talk-over rate, finish lag P50/P95, live caption WER (turn_taking.py)
        **turn_taking_summary(clip_dicts),
        "rss_mb_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # this process: loop + baselines
        "loop_memory": memory,  # the loop alone, fresh process (measure/memory.py); None without --memory
        "phrase_cache": phrases,  # repeated phrases served from the cache (loop/phrase_cache.py)
        "cold_start_s": round(cold, 3),
        "cpu_percent": round(100 * cpu / wall, 1) if wall else None,
        # the utterance holding the end of speech produced no speech: a failure, not left out quietly
        "failed": [r.id for r in failed],
        "failures": {r.id: r.reason for r in failed},
        "clips_measured": sum(r.turn_latency_ms is not None for r in results),
        # spoken before the oracle end (its last "speech" frame was trailing noise): no turn to measure
        "early": {r.id: r.reason for r in results if r.status == "early"},
        "speed": speed,
        "loop": {"partials": options.partials, "speculate_after_ms": options.speculate_after_ms,
                 "turn_policy": options.turn_policy, "beam_size": options.beam_size,
                 # seconds of silence before each clip (BenchOptions.lead; always with --loudspeaker)
                 "lead_s": LOUDSPEAKER_LEAD / SAMPLE_RATE if options.lead_in else 0.0,
                 # the lead and tail are the clip's room tone (BenchOptions.room_tone), else digital silence
                 "room_tone": options.room_tone,
                 "complete_after_ms": options.turn.complete_after_ms if options.turn_policy else None,
                 # partial captions stopped because a pause began while they decoded (loop/pause_watch.py)
                 "partials_stopped": sum(r.partials_stopped for r in results),
                 # decodes redone with a beam after an unsure greedy decode (LoopOptions.redecode; None: off)
                 "redecode_below": options.redecode.below_logprob if options.redecode else None,
                 "redecoded": sum(r.redecoded for r in results),
                 # utterances whose words came from their pieces after a sparse decode (LoopOptions.split; None: off)
                 "split": sum(t.split for r in results for t in r.traces) if options.split else None,
                 # utterances said from a held pause's second decode, with its tail (LoopOptions.held_postroll_ms)
                 "held_tail": sum(t.held_tail for r in results for t in r.traces),
                 # utterances ended on their transcript's end mark in their own language (TurnOptions.source_mark_langs)
                 "source_mark": sum(t.source_mark for r in results for t in r.traces)},
        "slowdown": options.slowdown or None,
        "oracle": (f"end of the last speech region of Silero over the whole clip (frames at p >= {_ORACLE.threshold}, "
                   f"gaps under {_ORACLE.min_silence_ms} ms closed, regions under {_ORACLE.min_speech_ms} ms dropped)"),
        "serial": "the loop's engines one after the other on the whole utterance: the loop's hangover, one "
                  "Whisper pass (smallest window, language detection picks the task), MT, first TTS chunk, "
                  "and that chunk's near-silence before its first sound (lead_ms)",
        "peer": None if not peer else (
            f"faster-whisper int8 (vad_filter, greedy, language given) + the same MT + piper-tts / espeak-ng "
            f"first sentence to its first sound, after faster-whisper's {peer.wait_ms:.0f} ms end-of-speech silence"),
        "paused": paused,
        "loudspeaker": _loudspeaker_summary(loud, options.loudspeaker_echo) if loud else None,  # None without --loudspeaker
        "clips": clip_dicts,
    }
    # the issues' targets judged on this run's figures (measure/targets.py): met, not met, or not measured here
    result["targets"] = [v.as_dict() for v in judge(result)]
    return result
