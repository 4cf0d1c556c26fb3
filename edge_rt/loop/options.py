"""Options of the real-time loop: one frozen dataclass, validated on creation."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from edge_rt.audio.frontend import FrontEndOptions
from edge_rt.loop.catchup import CatchUpOptions
from edge_rt.loop.context import ContextOptions
from edge_rt.loop.endpoint import EndpointOptions
from edge_rt.loop.preroll import NoisyPrerollOptions, SoundStartOptions
from edge_rt.loop.foreground import ForegroundOptions
from edge_rt.loop.overload import OverloadOptions
from edge_rt.loop.turn_policy import TurnOptions
from edge_rt.loop.onset import OnsetOptions
from edge_rt.loop.output import BARGE_IN
from edge_rt.loop.redecode import RedecodeOptions
from edge_rt.loop.split import SplitOptions
from edge_rt.stages.gain import GainOptions
from edge_rt.units import VAD_FRAME_MS

__all__ = ["LoopOptions", "RedecodeOptions", "SplitOptions", "loudspeaker_mode"]


@dataclass(frozen=True)
class LoopOptions:
    target: str  # language to speak
    source: str | None = None  # None: detect per utterance
    # With source None: the languages people speak to this device; detection chooses among them only
    # (in noise Whisper detects Arabic or Vietnamese in English fragments: see README, Noise). None: any.
    languages: tuple[str, ...] | None = None
    endpoint: EndpointOptions = field(default_factory=EndpointOptions)
    # An utterance that opens out of noise (its opening speech less than below_db over the second before) starts
    # extra_ms further back (loop/preroll.py). None: the endpointer's pre-roll always. Chosen on generated audio,
    # not the eval's clips (python tools/tune_redecode.py --items 88 --seed 53|59, the shipped candidate
    # "+noisy_preroll.below_db=15|20"): WER 39.3 -> 33.5 % at 20 dB (-5.7 points [-9.0, -2.9], 176 items), 34.2 %
    # at 15 dB; items empty 32 -> 23; clean items untouched (their 1 s before is digital silence), where 320 ms
    # for every utterance also gave 33.6 % but emptied en_fleurs_luna live.
    noisy_preroll: NoisyPrerollOptions | None = field(default_factory=NoisyPrerollOptions)
    # Out of a quiet room, an utterance whose pre-roll starts inside a sound starts where that sound does
    # (loop/preroll.py; at most max_ms further back). None: the endpointer's pre-roll always. Not tuned: generated
    # speech gives it nothing to move (python tools/tune_redecode.py --items 40, and --room [--soft-onset 0.3]
    # --items 60: 0 of 46, 67 and 67 starts), and on the tuning half of the real clips (tools/tune_turn.py's split,
    # through `translate`) above_db 6, 10 and 15 change no word; 10 dB stands over a room's frame-to-frame spread
    # (the real clips' room tone: loudest 20-ms frame 1.4-7 dB over the median in most). quiet_db 25 chosen on the
    # tuning half's English clips in `edge-rt eval --noise` (babble, pink, brown, music at 5 and 10 dB): at 20 an
    # utterance opened on a babble talker started 40 ms earlier and Whisper wrote its words (invented text 0 -> 1),
    # at 25 and 30 every mix as without the rule. Built from a held-out clip's diagnosis (README, Turn-taking, "A soft
    # first word"), so its gain there is not independent evidence.
    sound_start: SoundStartOptions | None = field(default_factory=SoundStartOptions)
    partials: bool = True  # re-decode the growing utterance for live captions and the stable prefix
    partial_interval_ms: int = 960  # how often a partial is decoded
    # A partial being decoded is abandoned when the newest partial_stop_ms of capture are partial_stop_db
    # below the loud frames of the last second it decodes: a pause has begun, and the speculation should
    # not wait for a caption (loop/pause_watch.py). None: partials always run to their end. Chosen on the
    # odd half of the real clips (sorted ids; Silero's pauses of >= 96 ms and its all-speech 96-ms
    # windows): 25 dB sees 43/53 pauses within 320 ms and calls 1.16 % of speech windows quiet with no
    # pause after them (20 dB: 53/53, 4.2 %; 30 dB: 32/53, 0.24 %); the even half: 41/49, 1.44 %.
    # A wrong stop costs one caption refresh; in noise a pause does not fall that far and nothing changes.
    partial_stop_db: float | None = 25.0
    partial_stop_ms: int = 96
    # Speculation: once speech pauses for this long, decode and translate the utterance so far and
    # synthesize its first clause; if the pause becomes the end, that work is reused (None: off). 32 ms (one VAD
    # frame) was tried on 2026-12-07 (twenty-ninth session; `python tools/loop_ab.py --vary
    # speculate_after_ms=64,32 --ids <half>`, each clip and its paused version, 2-core Xeon with AVX-VNNI): on the
    # tuning half (odd indices of the sorted ids) turn latency per clip -36 ms on average, P50 x0.988, paused set
    # P50 x0.906; on the other half per-clip median x0.999 and x1.000, P50 x0.916 and x1.001, but the mean +12 and
    # +43 ms (en_jfk +80 ms, zh_fleurs_1883's queued tail +412 / +721 ms): a one-frame gap inside a word starts
    # work the worker must finish before the real end's. Captions and talk-over the same in all four. Kept at 64.
    speculate_after_ms: int | None = 64
    # A pause the speculation's own evidence holds open (TurnPolicy.settled_hold: a trailing "and" or comma,
    # Whisper's end mark under mark_incomplete, no words) cannot end before TurnOptions.max_pause_ms (1024), and the
    # worker has nothing to do there. With a value here, right after the speculation the utterance is decoded (and
    # translated, its first clause synthesized) once more with this many ms of the pause after its last speech
    # frame, and that is what is said if the pause ends the turn: Whisper given audio that stops at the VAD's last
    # speech frame drops a word's soft end (en_jfk's "And so my fellow American.", held there by its end mark 0.34).
    # The turn policy's evidence stays the first speculation's (the tail moves Whisper's end mark, on which
    # TurnOptions was tuned: see EndpointOptions.postroll_ms). Only when it will be done before the hold ends
    # (Loop._redecode_held). **Off (None) by default**: on generated sentences (tools/tune_redecode.py --candidates
    # default+held_postroll_ms=none,default; 40 items each, seed 53 plain and with a 0.8-s hesitation, seed 59 with
    # it) WER 25.0 -> 25.3, 43.6 -> 44.5 and 48.5 -> 49.5 % with 64 ms (empty items 4 -> 3, 3 -> 3, 10 -> 8; no
    # babble-alone text added; +45-65 % decode time), Whisper moving words by chance as the audio grows ("The library
    # has a large collection" -> "The library for large collection"). On the real clips, interleaved in one run
    # (tools/loop_ab.py --vary held_postroll_ms=off,64): live English WER 6.98 -> 6.51 % and 7.62 -> 7.14 % (en_jfk
    # "Americans"), talk-over and per-clip turn latency the same; but the default is chosen on generated data, not on
    # the clips it is reported on.
    held_postroll_ms: int | None = None
    # When a pause ends the turn: the end-of-turn model, the speculative transcript and the speaker's
    # pauses end a complete sentence early and hold through a hesitation (see turn_policy.py).
    # None: the endpointer's plain hangover ends every pause.
    turn: TurnOptions | None = field(default_factory=TurnOptions)
    min_partial_s: float = 1.0  # no partial before this much speech
    overload: OverloadOptions = field(default_factory=OverloadOptions)  # what to shed when compute falls behind
    gain: GainOptions | None = field(default_factory=GainOptions)  # automatic gain of each utterance before ASR
    # Whisper writes fluent text for background talk (babble) it is unsure of. An utterance with
    # P(no speech) above the first value AND average log-probability below the second is not translated.
    # The log-probability limit is tuned on generated audio (tools/tune_unsure.py: the recipe's voices,
    # 32 items of babble alone and 32 of one sentence in babble, pink, brown or music noise at 0-10 dB):
    # invented text from babble alone came out at -1.011 and below (but one fluent sentence at -0.47 that
    # no limit catches), wanted speech at -0.99 and above (but one garbled transcript at -1.49); -1.0
    # decides the rest alike. The old -0.7 (chosen on clean clips) also dropped three wanted sentences.
    # Those figures were FP32 decodes (the tool loaded FP32 engines until 2026-12-03). With the INT8 engines
    # the loop runs (the decoder's `dynamic-all` twin): invented at -1.164 and below, one at -0.989 (and the
    # uncatchable one at -0.448); wanted at -0.939 and above (but a garbled one at -1.364). A limit in
    # (-0.989, -0.939) would decide all of them alike, but that window is 0.05 wide on 32 items: kept at -1.0.
    unsure: tuple[float, float] | None = (0.15, -1.0)
    # An utterance that gave no words (Whisper's no speech, or the unsure gate) is decoded once more from where
    # its loudest talker starts, when that is a second or more into it (foreground.py): in babble the VAD opens
    # on the background and the person speaking to the device is the later, louder part. None: not tried.
    # Defaults: see ForegroundOptions.
    foreground: ForegroundOptions | None = field(default_factory=ForegroundOptions)
    # An utterance whose end decode gave no words (after the foreground retry) says what an earlier speculation of
    # it heard at a pause, when that had words (they passed the same gates). In babble the VAD never closes: Whisper
    # heard en_fleurs_1938's talker at the pause after his last word (P(no speech) 0.64, log-probability -0.80) and,
    # given the 2 s of room after it too, no speech (0.61, -1.06). Only for an utterance that does not follow
    # speech: a follow-up skips the unsure gate, so its speculation can be a background talker's words (in babble
    # at 10 dB "stuff it into you." from another clip, P(no speech) 0.11, after the talker had finished).
    # Not tuned (a rule, no threshold). Noisy eval, off -> on, one sitting (edge-rt eval --noise --kinds babble,
    # pink --snr 0,5,10): babble 5 dB empty mixes 2 -> 0, WER 60.0 -> 58.6 %, every other row unchanged, no
    # invented text added; on generated audio (tools/tune_foreground.py, 72 talker and 72 babble-alone items,
    # seeds 23/29/31, 2 s of babble after the talker) it never applied: same text for every item.
    keep_heard: bool = True
    # What an utterance carries to the next one within a few seconds: its language, its text (context.py).
    context: ContextOptions = field(default_factory=ContextOptions)
    # A stage error drops its utterance and the loop goes on; this many in a row means the stage is
    # broken, not unlucky: the error goes up (the service exits and systemd restarts it).
    max_consecutive_errors: int = 5
    keep_traces: int | None = None  # Loop.traces keeps the last N (None: all; an always-on service bounds it)
    idle_sleep_s: float = 0.004  # wait when no hop is ready
    # Echo cancellation (+ filters) of each hop before the VAD, with what the sink played as reference
    # (audio/frontend.py). None: off, the headset default; `edge-rt run --loudspeaker` turns it on.
    frontend: FrontEndOptions | None = None
    # Someone starts talking while translated speech plays: "duck" it (-12 dB until they stop), "pause" it
    # (silence until they stop, then the rest), "stop" it (drop what is left of it), or "continue". continue:
    # a headset wearer talking over is not a reason to cut the translation; loudspeaker mode defaults to resay.
    # Measured in loudspeaker mode (tools/barge_in_policies.py, JACK, tiny pack, policies interleaved): the
    # talker over our speech was translated in 4/4 runs paused (their WER 7.1 %), 8/8 and 4/4 stopped (8.0,
    # 10.7 %), 3/8 and 2/4 ducked (23.7, 27.7 %: AEC3 suppresses them under the ducked echo); stop also cut
    # the translation of the speaker's own previous sentence when they went on over it (9 and 4 utterances
    # unheard), pause and duck none.
    # "resay": pause it, and when the person's utterance turns out to go on with the one whose translation was
    # playing (it starts within resay_within_s of that one's end), drop the held rest and speak a translation of
    # the two together instead (the whole sentence, translated with its end; the caption still shows only the new
    # words). Else the rest plays, as with pause. Loudspeaker mode's default since 2026-12-06: with pause the
    # speaker going on over our translation (talk-over, 11 of the 33 clips) waited for the held rest, and the
    # turn took 3-12 s; one interleaved run (tools/loop_ab.py --vary loudspeaker=off,on@pause,on --no-paused, the 33
    # clips: chosen on them, no split; the paused set, generated from them, in README) against the headset:
    # per-clip median x1.34 -> x1.10, P95 10322 -> 1530 ms, live English WER 9.77 -> 8.37 %, finish lag P50
    # 7272 -> 6980 ms. What it costs: what was heard of the first part's translation is said again.
    barge_in: str = "continue"
    # A barged utterance that starts this soon after the end of the one whose translation it interrupted goes on
    # with it (barge_in "resay"): a hesitation or a breath, as ContextOptions.lend_within_s. Not tuned.
    resay_within_s: float = 2.0
    # Speech queued behind earlier speech is spoken up to 1.25x faster so the listener catches up
    # (catchup.py; None: always the voice's pace).
    catch_up: CatchUpOptions | None = field(default_factory=CatchUpOptions)
    # Recent phrases: translation and first-clause audio of the last N distinct source phrases are
    # reused when a phrase repeats (phrase_cache.py; None: off). 64: a few minutes of conversation;
    # an entry is a short string plus ~1-3 s of audio (< 0.3 MB), so at most ~20 MB. Not tuned.
    phrase_cache: int | None = 64
    # Translated speech synthesized ahead when an utterance starts speaking, before the worker turns to other
    # work (a Whisper pass holds it 0.3-0.6 s): a streamed Piper sentence's first window is 0.37 s, and live
    # through JACK the source caption's decode after it left 0.22-0.48 s gaps before the next window. 1.0 s:
    # longer than one Whisper pass here; the second window (1.5 s) always reaches it.
    speech_lead_s: float = 1.0
    # Each utterance's translated speech starts where it sounds: the first clause's leading near-silence (Piper's,
    # 36 ms at the median on generated sentences) is not played (onset.py, OnsetOptions; None: played as
    # synthesized). What it changes live: README, Latency ("Speech that starts where it sounds").
    onset: OnsetOptions | None = field(default_factory=OnsetOptions)
    # Beam search for the text that is translated (the speculation at a pause and the end's decode; partial
    # captions and the source caption of a translate route stay greedy): AsrOptions.beam_size, 1 = greedy.
    # Whole English clips through the INT8 engines (12 clips, 215 words; one run): beam 5 against greedy
    # clean 4.7 / 6.5 % WER, pink 30.2 / 34.9 % at 5 dB, brown+pink+music at 5 and 10 dB 77.7 / 94.4 WER
    # points summed, babble 5 dB 64.7 / 60.5 %; each decoder step runs once per hypothesis (batch-1 graph),
    # so a decode takes ~2.8x as long. Off by default: on this CPU that lands on the turn latency of every
    # utterance the policy ends early (README, Noise); `--beam 5` where words matter more than speed.
    # Re-measured 2026-12-03 with the batched beam and the decoder's int8 output projection, live and
    # interleaved on the 33 clips (tools/loop_ab.py --vary beam_size=1,5): English WER 6.51 -> 6.05 % (one
    # word of 215) for turn latency x1.10 per clip (median) and P95 3657 -> 4762 ms: still 1.
    beam_size: int = 1
    # A greedy decode Whisper is unsure of (average log-probability below the limit) is decoded once more with
    # a beam, and the beam's words are taken unless they repeat themselves or drop most of greedy's (recognize.py,
    # RedecodeOptions; as faster-whisper falls back on a log-probability limit). Confident speech keeps greedy's speed; None: greedy only (or the beam always, beam_size > 1).
    # Transcribe routes only: a Whisper translation scores lower than a transcript (see recognize.py); on all
    # routes, live on the 33 clips (tools/loop_ab.py --vary redecode=off,-0.5), 11 of the 21 translated clips'
    # turns were 0.3-5.5 s longer (4 were 0.16-0.4 s shorter: the policy read the beam's end marks) and English
    # WER did not move (6.51 %).
    # Defaults (-0.5, beam 5) chosen on generated audio, not the eval clips (tools/tune_redecode.py --items 88,
    # seeds 53 and 59: the recipe's voices reading calibration sentences, clean and in pink/brown/music/babble at
    # 0-10 dB, and babble alone): WER 31.4 -> 28.4 and 40.8 -> 39.1 % (limits -0.2..-0.7 within 0.4 points of
    # it; a beam always 29.8 %), empties and babble-alone text unchanged, Whisper's decode time +26 % on seed 53
    # (a beam always +98 %). Reported on the eval clips in README (Noise).
    redecode: RedecodeOptions | None = field(default_factory=RedecodeOptions)
    # A transcript that says too little for its utterance's length (Whisper's decode ended early in noise) is decoded
    # again in pieces cut at its quietest moments, and the pieces' words are taken when there are clearly more of
    # them (split.py, SplitOptions; every route: the rate does not depend on the task). None: never. Defaults: see
    # SplitOptions (chosen on generated audio; README, Noise, reports the eval clips).
    split: SplitOptions | None = field(default_factory=SplitOptions)
    # A run of this many words or more that Whisper wrote twice in a row is said once (repeats.py), in the final
    # transcript and in a joint decode before the previous text is cut off (ContextOptions.joint). Across a
    # hesitation Whisper may write the first half twice: 4 of 88 generated sentences with a 0.8-s pause in them,
    # none of the same 88 without (tools/tune_redecode.py --hesitate 0.8, seed 53). 3, as RedecodeOptions.repeat_words
    # (a speaker seldom says three words twice in a row); chosen on that generated audio, not on the eval's clips.
    # None: off.
    repeat_words: int | None = 3

    def __post_init__(self):
        if self.barge_in not in BARGE_IN:
            raise ValueError(f"barge_in must be one of {', '.join(BARGE_IN)}, got {self.barge_in!r}")
        if not 0 < self.resay_within_s <= self.context.within_s:
            raise ValueError(f"resay_within_s must be in (0, context.within_s] ({self.context.within_s} s), "
                             f"got {self.resay_within_s}")
        if self.languages is not None and (not self.languages or isinstance(self.languages, str)):
            raise ValueError(f"languages must be a non-empty tuple of codes or None, got {self.languages!r}")
        if self.partial_stop_db is not None and self.partial_stop_db <= 0:
            raise ValueError(f"partial_stop_db must be > 0 dB or None, got {self.partial_stop_db}")
        if self.partial_stop_ms < VAD_FRAME_MS:
            raise ValueError(f"partial_stop_ms must be >= {VAD_FRAME_MS} (one VAD frame), got {self.partial_stop_ms}")
        if self.partial_interval_ms < 100:
            raise ValueError(f"partial_interval_ms must be >= 100, got {self.partial_interval_ms}")
        if self.unsure is not None and not (0 <= self.unsure[0] < 1 and self.unsure[1] < 0):
            raise ValueError(f"unsure must be (P(no speech) in [0, 1), average log-probability < 0) or None, "
                             f"got {self.unsure}")
        if self.repeat_words is not None and self.repeat_words < 1:
            raise ValueError(f"repeat_words must be >= 1 or None (off), got {self.repeat_words}")
        if not 1 <= self.beam_size <= 16:
            raise ValueError(f"beam_size must be in 1..16 (1 = greedy), got {self.beam_size}")
        if self.phrase_cache is not None and self.phrase_cache < 1:
            raise ValueError(f"phrase_cache must be >= 1 phrases or None (off), got {self.phrase_cache}")
        if self.speech_lead_s < 0:
            raise ValueError(f"speech_lead_s must be >= 0 seconds, got {self.speech_lead_s}")
        if self.max_consecutive_errors < 1:
            raise ValueError(f"max_consecutive_errors must be >= 1, got {self.max_consecutive_errors}")
        if self.keep_traces is not None and self.keep_traces < 1:
            raise ValueError(f"keep_traces must be >= 1 or None (keep all), got {self.keep_traces}")
        if self.speculate_after_ms is not None and self.speculate_after_ms >= self.endpoint.hangover_ms:
            raise ValueError(f"speculate_after_ms ({self.speculate_after_ms}) must be shorter than the hangover "
                             f"({self.endpoint.hangover_ms} ms), or None to turn speculation off")
        if self.held_postroll_ms is not None and not 0 < self.held_postroll_ms <= 1000:
            raise ValueError(f"held_postroll_ms must be 1-1000 ms of a held pause decoded with the utterance, or None "
                             f"(off), got {self.held_postroll_ms}")
        if self.turn is not None and self.turn.max_pause_ms < self.endpoint.hangover_ms:
            raise ValueError(f"turn.max_pause_ms ({self.turn.max_pause_ms}) must be at least the endpointer's "
                             f"hangover ({self.endpoint.hangover_ms} ms)")


def loudspeaker_mode(options: LoopOptions, barge_in: str | None = None, ready_tone: bool = True) -> LoopOptions:
    """``options`` in loudspeaker mode (`edge-rt run --loudspeaker`; `edge-rt bench --loudspeaker` measures it): the
    capture front end (echo cancellation, the sink's playback as far end, the ready tone at start unless
    ``ready_tone`` is False) and barge-in ``barge_in`` (None: resay)."""
    frontend = FrontEndOptions() if ready_tone else FrontEndOptions(ready_tone_ms=0)
    return replace(options, frontend=frontend, barge_in=barge_in or "resay")
