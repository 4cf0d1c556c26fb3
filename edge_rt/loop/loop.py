"""The real-time loop: capture ring → VAD → endpointer → ASR → MT → TTS → playback.

One worker thread owns the engines and the stage state; audio callbacks only
copy into or out of rings. Each iteration takes one 32 ms hop from the capture
ring, runs the VAD and the endpointer, and does at most one piece of heavier
work (a partial decode, the final decode + translation + first clause, the same
done ahead at a pause, or the next clause), so the capture side is read at least
every few hundred ms.

At a pause the turn policy (turn_policy.py) decides when the pause ends the turn: the
speculative transcript and the end-of-turn model (``stages.turn``, when the pack has one) end
a complete sentence at once and hold the endpointer through a hesitation.

Time is the capture ring's sample index; the trace converts it to monotonic
ns through the source's clock.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple, Sequence

import numpy as np

from edge_rt.audio.frontend import FrontEnd
from edge_rt.audio.sinks import Sink
from edge_rt.audio.sources import Source
from edge_rt.audio.tone import ready_tone
from edge_rt.errors import EdgeRtError, UnsupportedLanguageError
from edge_rt.loop.endpoint import Endpointer, Event
from edge_rt.loop.history import History
from edge_rt.loop.observer import LoopObserver
from edge_rt.loop.options import LoopOptions
from edge_rt.loop.output import SpeechQueue
from edge_rt.loop.overload import OverloadStats
from edge_rt.loop.context import Context
from edge_rt.loop.catchup import speaking_rate
from edge_rt.loop.pause_watch import PauseWatch, ResumeWatch, speech_level
from edge_rt.loop.phrase_cache import PhraseCache
from edge_rt.loop.preroll import noisy_start, sound_start
from edge_rt.loop.repeats import said_once
from edge_rt.loop.recognize import Hypothesis, Resay, asr_task, level, recognize, route_task, with_first_clause
from edge_rt.loop.stages import Stages
from edge_rt.loop.stream import LocalAgreement
from edge_rt.loop.trace import TracePublisher, TraceWriter, UtteranceTrace
from edge_rt.loop.turn_policy import TurnPolicy, pause_frames
from edge_rt.stages.asr.beam import BeamUnsupportedError
from edge_rt.stages.asr.decoding import DecodeStopped
from edge_rt.stages.asr.tokenizer import has_words
from edge_rt.stages.tts.voice import first_clauses
from edge_rt.units import SAMPLE_RATE, VAD_FRAME, VAD_FRAME_MS

__all__ = ["Loop", "LoopOptions"]  # LoopOptions lives in options.py; importable from here too

HISTORY = 1 << 20  # 65 s of capture audio kept for utterance slices
TURN_WINDOW = 8 * SAMPLE_RATE  # the end-of-turn model sees the utterance's last 8 s

Caption = Callable[[str, int, str, str], None]  # (kind, utterance, lang, text); kind: partial|final|translation


@dataclass
class _Utterance:
    trace: UtteranceTrace
    agreement: LocalAgreement = field(default_factory=LocalAgreement)
    next_partial: int = 0  # sample index at which the next partial is due
    speculation: Hypothesis | None = None
    heard: Hypothesis | None = None  # the latest speculation of it that heard words (LoopOptions.keep_heard)
    pause: int = 0  # silent frames of the current pause (0: speaking)
    held: int = -1  # speech end sample of the held pause already decoded again with its tail (held_postroll_ms)
    spec_ms: float = 0.0  # wall-clock ms the latest speculation took (its decode, translation and first clause)
    # barge_in "resay": what the translation this one talked over and holds covers; None: none, or another policy
    resay: "_Said | None" = None
    # (speech end sample, text): the utterance up to that pause transcribed in its own language, because its
    # translation's end mark held the pause (TurnOptions.source_mark_langs); the source caption if that pause ends it
    source: tuple[int, str] | None = None


class _Said(NamedTuple):
    """What the latest translation sent to speech covers: its utterance, the first capture sample of its audio and its
    source text ("" while pending); with the utterance before it when it was resaid (barge_in "resay")."""

    trace: UtteranceTrace
    start: int
    text: str


class Loop:
    """Runs until :meth:`stop` or until a file source is exhausted (:meth:`run` returns the traces)."""

    def __init__(self, stages: Stages, source: Source, sink: Sink, options: LoopOptions,
                 on_caption: Caption | None = None, trace: TraceWriter | None = None,
                 observers: Sequence[LoopObserver] = ()):
        self.stages = stages
        self.source = source
        self.sink = sink
        self.options = options
        self.on_caption = on_caption or (lambda *a: None)
        self.observers = tuple(observers)  # see observer.py: called on the worker thread
        self.endpointer = Endpointer(options.endpoint)
        self._context = Context(options.context)  # the previous utterance's language and text
        self.turn_policy = None if options.turn is None else TurnPolicy(options.turn, options.endpoint.hangover_ms)
        self.turn_errors = 0  # end-of-turn model calls that raised (the policy decides without it; in errors too)
        self._p_prev = 0.0  # the previous hop's speech probability
        self.history = History(HISTORY)
        self.published = TracePublisher(options.keep_traces, trace, self.observers)
        self.traces = self.published.traces
        self.errors: collections.deque[str] = collections.deque(maxlen=100)  # the latest, for humans
        self.stage_errors = 0  # utterances dropped because a stage raised
        self.speculation_errors = 0  # work ahead at a pause that raised (the end does it again; in errors too)
        self.overload = OverloadStats()
        self._errors_in_row = 0
        self._reported: BaseException | None = None  # already passed to on_error
        self._hop = np.empty(VAD_FRAME, np.float32)
        self._quiet = np.zeros(VAD_FRAME, np.float32)  # what the VAD hears for a hop of our own echo
        self._stop = threading.Event()
        self._current: _Utterance | None = None
        self._speech = SpeechQueue(sink, options.onset)  # synthesized, not yet accepted by the sink
        # Repeated phrases: translation and first clause reused (stats: hits, saved time; bench reports them).
        self.phrases = PhraseCache(options.phrase_cache) if options.phrase_cache else None
        # Echo cancellation before the VAD (audio/frontend.py): the VAD, the history (ASR) and observers
        # get the cleaned hop.
        self._frontend = FrontEnd.for_loop(options.frontend, source.clock, sink) if options.frontend else None
        # The front end hands back each hop's audio `lag` samples late (10-18 ms) while it cleans it, and the loop's
        # sample indices are its output's: the VAD, the endpointer and every decode read the same history, so a decode
        # hears exactly the audio the VAD framed (where nothing of ours played, the capture itself, as it comes:
        # FrontEndOptions.passthrough_after_ms, passthrough_in_time). Sample i was captured at index
        # i - FrontEnd.lag_at(i): the trace's times are taken there (_captured_at).
        # Played once at start so AEC3 learns the loudspeaker's echo path before anyone talks (audio/tone.py).
        self._ready_tone = (ready_tone(sink.rate, options.frontend.ready_tone_ms, options.frontend.ready_tone_db)
                            if self._frontend is not None and self._frontend.cancels_echo else None)
        self._barged = False  # someone talks over the speech: ducked until their utterance ends
        self._clauses: Iterator | None = None  # the rest of the current translation's clauses
        self._clause_open = False  # the last chunk queued was not its clause's last (a streamed sentence)
        self._resampler = None  # the current clause's soxr stream when the sink runs at another rate
        self._clause_trace: UtteranceTrace | None = None
        self._said: _Said | None = None
        self._count = 0
        self.hops = 0
        # A partial still decoding when a pause begins is abandoned (pause_watch.py); how many were.
        self._pause_watch = (PauseWatch(source.ring, options.partial_stop_ms * SAMPLE_RATE // 1000,
                                        options.partial_stop_db)
                             if options.partials and options.partial_stop_db is not None else None)
        self.partials_stopped = 0
        # The transcript made in a pause for its end mark (_source_mark) is abandoned once the speaker resumes
        # (pause_watch.ResumeWatch: the newest 96 ms 10 dB over the pause so far; not tuned: a wrong stop costs only
        # that transcript's verdict, the translation's mark then holds the pause as before).
        self._resume_watch = ResumeWatch(source.ring, 96 * SAMPLE_RATE // 1000, 10.0)
        self.source_marks_stopped = 0
        self.heard_kept = 0  # utterances whose end decode gave no words, spoken from an earlier pause's words
        # The text that is translated: decoded with a beam when asked (partials stay greedy); the same engines.
        self._final_asr = stages.asr
        if options.beam_size > 1:
            asr = stages.asr
            self._final_asr = asr.with_options(dataclasses.replace(asr.options, beam_size=options.beam_size))
        # A greedy decode Whisper is unsure of is decoded again with this beam (LoopOptions.redecode). A decoder
        # that keeps its cache on the device (TensorRT) runs one sequence: greedy only there, and why is kept.
        self._redecode_asr = None
        self.redecode_off: str | None = None  # why the beam view could not be made (asked for, none here)
        if options.redecode is not None and options.beam_size == 1:
            asr = stages.asr
            try:
                self._redecode_asr = asr.with_options(dataclasses.replace(asr.options,
                                                                          beam_size=options.redecode.beam_size))
            except BeamUnsupportedError as e:
                self.redecode_off = str(e)
        self.redecoded = 0  # utterance decodes taken from the beam's second decode
        self.split = 0  # utterance decodes taken from their pieces (LoopOptions.split)
        self.lent = 0  # utterance decodes taken with a dropped utterance's audio in front (ContextOptions.lend_within_s)
        self.resaid = 0  # held translations dropped for one of the whole sentence (barge_in "resay")
        # Fail now, not on the first utterance.
        if options.source is not None:
            stages.route(options.source, options.target)
        elif options.languages is not None:
            for lang in options.languages:  # an unknown code or a language with no route, named now
                stages.route(lang, options.target)
        elif options.target not in stages.targets():
            raise UnsupportedLanguageError(f"cannot translate into {options.target!r}: this pack translates "
                                           f"into {', '.join(stages.targets())}")

    # -- control ---------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def frontend(self) -> FrontEnd | None:
        """The capture front end (LoopOptions.frontend), None without one; read its counters, do not drive it."""
        return self._frontend

    def run(self) -> list[UtteranceTrace]:
        """The worker: returns when stopped or when the source is finished and all speech was handed over."""
        src = self.source
        ring = src.ring
        reset = getattr(self.stages.vad, "reset", None)
        if reset is not None:
            reset()  # a new stream: the VAD's recurrent state from an earlier run would shift every start
        self.sink.start()
        if self._ready_tone is not None and len(self._ready_tone):
            self.sink.write(self._ready_tone)
        failed = True
        try:
            src.start()
            for o in self.observers:
                o.on_start(self)
            while not self._stop.is_set():
                for o in self.observers:
                    o.on_tick()
                if ring.available() < VAD_FRAME:
                    src.pump()
                    if ring.available() >= VAD_FRAME:
                        continue
                    if self._advance_output():
                        continue
                    if src.finished:
                        break
                    time.sleep(self.options.idle_sleep_s)
                    continue
                self._step()
            self._finish()
            failed = False
        except Exception as e:  # the audio device, the VAD, or a stage failing again and again: go down
            if e is not self._reported:
                for o in self.observers:
                    o.on_error(e, self._current.trace if self._current else None)
            raise
        finally:
            self._stop_audio(failed)
        return self.traces

    def _stop_audio(self, failed: bool) -> None:
        """Stop both ends, the sink even when the source cannot be stopped (its device vanished)."""
        try:
            self.source.stop()
        except Exception:  # noqa: BLE001 - when already going down, the first error is the one to report
            if not failed:
                raise
        finally:
            self.sink.stop()

    # -- one hop -----------------------------------------------------------------
    def _step(self) -> None:
        first, n = self.source.ring.read_into(self._hop)
        if self._frontend is not None:
            self._frontend.process(first, self._hop[:n], speaking=self._current is not None)
        self.history.write(first, self._hop[:n])
        self.hops += 1
        for o in self.observers:
            o.on_hop(first, self._hop[:n])
        # our own speech's residual echo: no utterance opens on it (audio/frontend.py, echo gate), and the VAD hears
        # silence there, as with a headset (its recurrent state keeps nothing of our voice)
        ours = self._current is None and self._frontend is not None and (self._frontend.echo or self._frontend.held)
        p = self.stages.vad(self._quiet if ours else self._hop)
        if ours:
            p = 0.0
        frame = (first + n) // VAD_FRAME - 1
        for event in self.endpointer.push(frame, p):
            self._on_event(event)
        if self._current is not None:
            self._pause(first + n)
        if self._current is not None:
            self._maybe_partial(first + n, p)
        self._p_prev = p
        self._advance_output()

    def _on_event(self, event: Event) -> None:
        clock = self.source.clock
        if event.kind == "start":
            self._count += 1
            start = event.sample
            now = self.history.end  # this hop's end: the VAD frames that opened the utterance end here
            opened = max(start, now - self.options.endpoint.start_frames * VAD_FRAME)
            if self.options.noisy_preroll is not None:  # out of noise: further back (loop/preroll.py)
                start = noisy_start(self.history, start, opened, now, self.endpointer.previous_end,
                                    self.options.noisy_preroll)
            if self.options.sound_start is not None:  # out of quiet: where the sound starts (loop/preroll.py)
                start = sound_start(self.history, start, opened, now, self.endpointer.previous_end,
                                    self.options.sound_start)
            tr = UtteranceTrace(self._count, start_sample=start)
            tr.stamp("speech_start", clock.ns(self._captured_at(start)))
            self._current = _Utterance(tr, next_partial=start + int(self.options.min_partial_s * SAMPLE_RATE))
            self._barge_in()
            return
        utt, self._current = self._current, None
        barged, self._barged = self._barged, False
        if barged and (utt is None or utt.resay is None):  # resay: held until its translation is known (_release)
            self._speech.resume()
        if utt is None:
            return
        tr = utt.trace
        tr.end_sample = event.sample
        tr.stamp("speech_end", clock.ns(self._captured_at(event.sample)))
        tr.stamp("end_detected", clock.now_ns())
        tr.end_reason = event.reason
        lag = self._capture_lag_s()
        if self.options.overload.drop(lag):  # level 3: catch up with the capture side instead of decoding
            self.overload.utterances_dropped += 1
            tr.dropped = f"overload: {lag:.1f} s behind the microphone, dropped without decoding"
            self._close(tr)
            self._release(utt.resay, False)
            return
        try:
            tr.source_mark = (tr.end_reason == "complete" and self.turn_policy is not None
                              and self.turn_policy.source_mark_used)
            self._finalize(tr, utt.speculation, utt.heard, utt.resay, utt.source)
        except EdgeRtError as e:  # a bad request: the loop goes on, the utterance is reported
            tr.dropped = str(e)
            self.errors.append(str(e))
            for o in self.observers:
                o.on_error(e, tr)
            self._close(tr)
        except Exception as e:  # a stage failed on this utterance: drop it, keep listening
            self._stage_failed(e, tr)
        finally:
            self._release(utt.resay, False)  # no translation of the whole: the held speech plays on
        if barged and self._frontend is not None and not ((tr.text or "") + (tr.translation or "")).strip():
            # It opened over our speech and held no word: a residual of our own voice passed the echo gate, so
            # AEC3 is not where it was; openings wait again as while it first converged (FrontEnd.reconverge).
            # Not after a talker with words: the wait also holds back a real talker over our speech (offline, one
            # starting 0.5 s into our first reply opened 512 ms later), and the speaker going on over our
            # translation is the common barge-in; a wordless one is the evidence that AEC3 let our voice through.
            self._frontend.reconverge()

    def _stage_failed(self, e: Exception, tr: UtteranceTrace) -> None:
        """Drop the utterance a stage raised on (counted, observers told), unless it keeps happening."""
        self.stage_errors += 1
        self._errors_in_row += 1
        msg = f"{type(e).__name__}: {e}"
        self.errors.append(f"utterance {tr.utterance}: {msg}")
        if "tts_first_chunk" not in tr.t_ns:  # nothing of it was spoken
            tr.dropped = f"stage error: {msg}"
        for o in self.observers:
            o.on_error(e, tr)
        self._close(tr)
        if self._errors_in_row >= self.options.max_consecutive_errors:
            self._reported = e
            raise e

    def _pause(self, now: int) -> None:
        """Inside an utterance: at a pause, work ahead and let the turn policy end or hold it."""
        utt = self._current
        silence = self.endpointer.silence_frames
        policy = self.turn_policy
        if silence == 0:  # speaking: a pause that just ended was inside the utterance
            if utt.pause and policy is not None:
                policy.speech_resumed(utt.pause * VAD_FRAME_MS)
            utt.pause = 0
            return
        if utt.pause == 0 and policy is not None:
            policy.pause_started()
        utt.pause = silence
        spoken = self._maybe_speculate()
        if policy is None:
            return
        hyp = utt.speculation
        if spoken and hyp is not None and hyp.end == self.endpointer.speech_end_sample:
            policy.note_text(hyp.text or hyp.translation, hyp.lang if hyp.text else self.options.target,
                             hyp.end_mark_prob)
            if hyp.source_pending and policy.wants_source_mark(hyp.lang):
                self._source_mark(utt, hyp, policy)
        turn = getattr(self.stages, "turn", None)
        if turn is not None and silence in policy.model_frames:
            try:
                policy.note_turn(turn.probability(self.history.slice(max(utt.trace.start_sample, now - TURN_WINDOW),
                                                                     now)))
            except Exception as e:  # noqa: BLE001 - evidence only: the policy decides without it
                self.turn_errors += 1
                self.errors.append(f"utterance {utt.trace.utterance} end-of-turn model: {type(e).__name__}: {e}")
        decision = policy.decide()
        if (self.options.held_postroll_ms is not None and not spoken and decision.reason == "incomplete"
                and policy.settled_hold):
            self._redecode_held(decision.end_at_ms)
        frames = pause_frames(decision.end_at_ms)
        if silence >= frames:
            for event in self.endpointer.force_end(decision.end_reason):
                self._on_event(event)
        else:
            self.endpointer.hold(frames, decision.end_reason)

    def _maybe_speculate(self) -> bool:
        """At the start of a pause, do the end-of-utterance work ahead; True if it did."""
        o = self.options
        if o.speculate_after_ms is None:
            return False
        frames = max(1, -(-o.speculate_after_ms * SAMPLE_RATE // (1000 * VAD_FRAME)))
        if self.endpointer.silence_frames != frames:
            return False
        utt = self._current
        end = self.endpointer.speech_end_sample
        if o.overload.skip_optional(self._capture_lag_s()):
            self.overload.speculations_skipped += 1
            return False
        t0 = time.perf_counter()
        try:
            hyp = self._recognize(utt.trace.start_sample, end, self._postroll(end), utt.resay)
        except Exception as e:  # noqa: BLE001 - work ahead only: counted here, the real end decodes again
            self._speculation_failed(e, utt.trace.utterance, "decode")
            return False
        utt.speculation = self._synthesize_ahead(hyp, utt.trace.utterance)
        utt.spec_ms = (time.perf_counter() - t0) * 1000
        if _has_words(hyp):
            utt.heard = utt.speculation
        return True

    def _source_mark(self, utt: _Utterance, hyp: Hypothesis, policy: TurnPolicy) -> None:
        """The utterance up to this pause transcribed in its own language, where its translation's end mark alone
        would hold the pause (TurnPolicy.wants_source_mark): the transcript's end mark goes to the policy, and its
        text is kept as the source caption in case this pause ends the utterance (the audio the caption decodes)."""
        lag = self._capture_lag_s()
        if self.options.overload.skip_optional(lag):
            self.overload.speculations_skipped += 1
            return
        start, now = utt.trace.start_sample, self.history.end
        pause = self._heard(hyp.end, now)
        stop = self._resume_watch.arm(float(np.sqrt(np.mean(np.square(pause)))) if len(pause) else 0.0, now)
        try:
            r = self.stages.asr.transcribe(self._level(self._heard(start, hyp.end)), stop=stop,
                                           **self._context.at(start).transcribe_kwargs(hyp.lang))
        except DecodeStopped:  # the speaker went on: the translation's mark stands (and the pause goes on)
            self.source_marks_stopped += 1
            return
        except Exception as e:  # noqa: BLE001 - evidence only: the translation's mark stands
            self._speculation_failed(e, utt.trace.utterance, "decode")
            return
        utt.source = (hyp.end, said_once(r.text.strip(), hyp.lang, self.options.repeat_words))
        policy.note_source_mark(r.end_mark_prob)

    def _redecode_held(self, end_at_ms: int) -> None:
        """A pause the speculation's evidence holds open (TurnPolicy.settled_hold) until ``end_at_ms``: once, the
        utterance decoded again with ``held_postroll_ms`` of the pause after its last speech frame; that is what the
        end says if this pause becomes it. The turn policy is not told (its evidence stays the speculation's).

        Only when it will be done before the hold ends: the pause so far in wall-clock time (its frames and the
        capture the worker has not read, which the speculation's own decode left behind) plus a quarter more than
        the speculation took. A long translated utterance's decode here takes 600-650 ms (zh_aishell1_BAC009S0764W0121
        with a word-search pause: 652 ms, then 619 ms with the tail), and a second one started at 96 ms of pause ran
        past the 1024-ms end and delayed the speech by ~700 ms. The quarter is not tuned: the decode hears 64 ms
        more audio than the speculation did (118 -> 138 ms and 652 -> 619 ms on two such pauses)."""
        o, utt = self.options, self._current
        end = self.endpointer.speech_end_sample
        hyp = utt.speculation
        tail = o.held_postroll_ms * SAMPLE_RATE // 1000
        # hyp.tail >= tail: the speculation itself had it (EndpointOptions.postroll_ms)
        if utt.held == end or hyp is None or hyp.end != end or hyp.tail >= tail or self.history.end - end < tail:
            return
        utt.held = end
        lag = self._capture_lag_s()
        if self.endpointer.silence_frames * VAD_FRAME_MS + lag * 1000 + 1.25 * utt.spec_ms > end_at_ms:
            return  # it would still be decoding when the hold ends: the speculation stands
        if o.overload.skip_optional(lag):
            self.overload.speculations_skipped += 1
            return
        try:
            again = self._recognize(utt.trace.start_sample, end, tail, utt.resay)
        except Exception as e:  # noqa: BLE001 - work ahead only: the speculation stands
            self._speculation_failed(e, utt.trace.utterance, "decode")
            return
        if not _has_words(again):  # the tail took the words away: the speculation stands
            return
        utt.speculation = utt.heard = self._synthesize_ahead(dataclasses.replace(again, held=True),
                                                            utt.trace.utterance)

    def _speculation_failed(self, e: Exception, utterance: int, what: str) -> None:
        """Count and report work ahead that raised; the utterance is not dropped (its end does the work again)."""
        self.speculation_errors += 1
        self.errors.append(f"utterance {utterance} speculative {what}: {type(e).__name__}: {e}")

    def _synthesize_ahead(self, hyp: Hypothesis, utterance: int) -> Hypothesis:
        """The speculative hypothesis with its first clause synthesized (see :func:`with_first_clause`)."""
        try:
            return with_first_clause(hyp, self.stages.tts, self.options.target, rate=self._rate(hyp),
                                     phrases=self.phrases)
        except Exception as e:  # noqa: BLE001 - work ahead only: counted here, the end synthesizes again
            self._speculation_failed(e, utterance, "synthesis")
            return hyp

    def _maybe_partial(self, now: int, p: float) -> None:
        utt = self._current
        if not self.options.partials or now < utt.next_partial:
            return
        if self.endpointer.silence_frames:
            return  # a pause: speculation decodes instead
        if p < self._p_prev and p < self.endpointer.threshold:
            # Speech is fading: a pause may be starting, and a decode begun now would hold the worker
            # until the pause watch stops it (within ~5 ms of noticing, in the encoder too). Next hop.
            return
        utt.next_partial = now + self.options.partial_interval_ms * SAMPLE_RATE // 1000
        if self.options.overload.skip_optional(self._capture_lag_s()):
            self.overload.partials_skipped += 1  # overloaded: partials are the first thing to go
            return
        heard = self._heard(utt.trace.start_sample, now)
        audio = self._level(heard)
        try:
            context = self._context.at(utt.trace.start_sample)
            kw = context.transcribe_kwargs(self.options.source, self.options.languages)
            kw.pop("prompt", None)  # captions only: no context prompt
            if self._pause_watch is not None:  # the last second's loud frames: the level a pause falls from
                kw["stop"] = self._pause_watch.arm(speech_level(heard[-SAMPLE_RATE:]), now)
            result = self.stages.asr.transcribe(audio, **kw)
        except DecodeStopped:
            self.partials_stopped += 1  # a pause began: the VAD reads the backlog, the speculation follows
            return
        except Exception as e:  # noqa: BLE001 - captions only: the final decode decides and reports
            self.errors.append(f"utterance {utt.trace.utterance} partial: {type(e).__name__}: {e}")
            utt.next_partial = sys.maxsize  # no more partials for this utterance
            return
        if result.text:
            utt.agreement.update(result.text)
            self.on_caption("partial", utt.trace.utterance, result.language, result.text)

    def _postroll(self, end: int, reason: str = "") -> int:
        """Samples after speech end ``end`` that Whisper decodes with the utterance (EndpointOptions.postroll_ms):
        none at a max-length split (the next utterance starts there), else as many as were captured, up to it."""
        if reason == "max_length":
            return 0
        return max(0, min(self.options.endpoint.postroll_samples, self.history.end - end))

    def _heard(self, a: int, b: int) -> np.ndarray:
        """The audio of samples [a, b) (up to what is there now): what the VAD heard there."""
        return self.history.slice(a, b)

    def _recognize(self, start: int, end: int, tail: int = 0, resay: _Said | None = None) -> Hypothesis:
        """One Whisper pass + MT of capture samples [start, end + tail) (see :func:`recognize`; ``tail``: the
        post-roll), together with the previous utterance's audio when this one follows it (ContextOptions.joint);
        ``resay``: the utterance whose held translation this one may take over (barge_in "resay")."""
        stop = end + tail
        context = self._context.at(start)
        known, o = context.joint, self.options.context
        joint = None
        if (known is not None and end - start >= o.joint_min_s * SAMPLE_RATE
                and end - known.start_sample <= o.joint_max_s * SAMPLE_RATE
                and route_task(asr_task(self.stages, self.options.target), known.lang) == "transcribe"):
            joint = self._level(self._heard(known.start_sample, stop))
        lent = None
        if context.lent is not None and end - context.lent <= o.joint_max_s * SAMPLE_RATE:
            lent = self._level(self._heard(context.lent, stop))  # a dropped opening (ContextOptions.lend_within_s)
        whole = None
        if resay is not None and end - resay.start <= o.joint_max_s * SAMPLE_RATE:
            whole = Resay(resay.text, resay.trace.lang, self._level(self._heard(resay.start, stop)))
        hyp = recognize(self.stages, self.options, self._level(self._heard(start, stop)), end,
                        self.source.clock, context, self.phrases, joint, self._final_asr, self._redecode_asr, lent,
                        whole)
        self.redecoded += hyp.redecoded
        self.split += hyp.split
        self.lent += hyp.lent
        return dataclasses.replace(hyp, tail=tail) if tail else hyp

    def _rate(self, hyp: Hypothesis) -> float:
        """Speaking rate of ``hyp``'s translation: faster while earlier speech is still queued (catchup.py), unless
        it takes the place of that speech (barge_in "resay")."""
        return speaking_rate(0.0 if hyp.resaid else self._output_backlog_s(), self.options.catch_up)

    def _level(self, audio: np.ndarray) -> np.ndarray:
        """Automatic gain: a quiet utterance reaches Whisper at speech level (see stages/gain.py)."""
        return level(audio, self.options)

    def _finalize(self, tr: UtteranceTrace, speculation: Hypothesis | None = None,
                  heard: Hypothesis | None = None, resay: _Said | None = None,
                  source: tuple[int, str] | None = None) -> None:
        tail = self._postroll(tr.end_sample, tr.end_reason)
        if speculation is not None and speculation.end == tr.end_sample and (
                speculation.tail == tail or (speculation.held and tr.end_reason != "max_length")):
            hyp = speculation  # no speech since the pause began: the work is done (a held one: with its tail)
            tr.speculative = True
        else:
            hyp = self._recognize(tr.start_sample, tr.end_sample, tail, resay)
        if (not _has_words(hyp) and heard is not None and self.options.keep_heard
                and not self._context.at(tr.start_sample).follows):
            # Whisper heard words in this utterance at a pause, and given all of it, no speech: in babble the VAD
            # never closes, and the room after the talker's last word tips the whole to "no speech" (see
            # LoopOptions.keep_heard). What it heard at the pause passed the same gates: say that.
            hyp = heard
            tr.speculative = True
            self.heard_kept += 1
        # Work done ahead counts as ready when the end was declared.
        detected = tr.t_ns["end_detected"]
        tr.lang, tr.text, tr.redecoded, tr.split, tr.lent = hyp.lang, hyp.text, hyp.redecoded, hyp.split, hyp.lent
        tr.resaid, tr.held_tail = hyp.resaid, hyp.held
        self._errors_in_row = 0  # ASR and MT worked; a TTS failure is counted again
        if not _has_words(hyp):  # "" or a lone "." on noise
            tr.dropped = "no speech recognised (silence or noise)"
            if hyp.gated:  # words Whisper was unsure of: lent to an utterance that follows at once
                self._context.dropped(tr.start_sample, tr.end_sample)
            self._close(tr)
            return
        self._context.remember(tr.end_sample, tr.lang, tr.text, tr.start_sample)  # noise lends no language
        if not hyp.source_pending:
            self.on_caption("final", tr.utterance, tr.lang, tr.text)
        tr.stamp("asr_final", max(hyp.asr_ns, detected))
        tr.translation = hyp.translation
        tr.stamp("mt_done", max(hyp.mt_ns, detected))
        self.on_caption("translation", tr.utterance, self.options.target, hyp.translation)
        if not hyp.translation:
            tr.dropped = "empty translation"
            self._close(tr)
            return
        self._release(resay, hyp.resaid)  # barge_in "resay": the held speech plays on, or this translation replaces it
        # Streaming TTS: the first clause now, the rest one per iteration.
        self._finish_previous()
        if hyp.speech is None:  # not synthesized during the pause (or nothing to speak): the first clause now
            hyp = with_first_clause(hyp, self.stages.tts, self.options.target, rate=self._rate(hyp),
                                    phrases=self.phrases)
        clauses = itertools.chain([hyp.speech[0]], hyp.speech[1]) if hyp.speech is not None else iter(())
        if self.options.overload.shorten(self._output_backlog_s()):  # level 2: say less
            self.overload.translations_shortened += 1
            clauses = first_clauses(clauses, self.options.overload.clauses)
        self._clauses = clauses
        self._clause_open = False
        self._clause_trace = tr
        self._said = _Said(tr, resay.start, hyp.whole) if hyp.resaid else _Said(tr, tr.start_sample, tr.text)
        self._next_clause()
        # A streamed clause comes 0.37 s at a time: queue speech_lead_s before the work that follows (the
        # source caption, the next utterance's partials) holds the worker, or the speaker hears a gap.
        while self._output_backlog_s() < self.options.speech_lead_s and self._next_clause():
            pass
        if hyp.source_pending:  # the translation is on its way: now the source-language caption
            # transcribed already at the pause that became the end (_source_mark), from the same audio
            known = source[1] if (source is not None and hyp is speculation and not hyp.held
                                  and source[0] == tr.end_sample) else None
            self._transcribe_source(tr, hyp.tail if hyp.held else 0, known)

    def _transcribe_source(self, tr: UtteranceTrace, tail: int = 0, known: str | None = None) -> None:
        """The source-language caption of a translate route's utterance; ``tail``: the samples after its end that
        its translation heard (a held pause's second decode), so the caption hears the same word endings; ``known``:
        that caption, transcribed already (at the pause that became the end)."""
        audio = self._level(self._heard(tr.start_sample, tr.end_sample + tail)) if known is None else None
        try:
            if known is None:
                text = self.stages.asr.transcribe(
                    audio, **self._context.at(tr.start_sample).transcribe_kwargs(tr.lang)).text.strip()
                known = said_once(text, tr.lang, self.options.repeat_words)  # as recognize() says the translated text
            tr.text = known
            self._context.remember(tr.end_sample, tr.lang, tr.text, tr.start_sample)
        except Exception as e:  # noqa: BLE001 - a caption only: the translation is already spoken
            self.errors.append(f"utterance {tr.utterance} source caption: {type(e).__name__}: {e}")
            return
        self.on_caption("final", tr.utterance, tr.lang, tr.text)

    # -- output ------------------------------------------------------------------
    def _next_clause(self) -> bool:
        if self._clauses is None:
            return False
        tr = self._clause_trace
        try:
            chunk = next(self._clauses, None)
            if chunk is not None:
                samples = chunk.samples
                if chunk.sample_rate != self.sink.rate:  # one soxr stream per clause: its chunks are one signal
                    if not self._clause_open or self._resampler is None:
                        from edge_rt.audio.files import resampler

                        self._resampler = resampler(chunk.sample_rate, self.sink.rate)
                    samples = self._resampler.resample_chunk(samples.astype(np.float32, copy=False),
                                                             last=chunk.last)
                self._clause_open = not chunk.last
        except Exception as e:  # TTS failed on this utterance: the rest of it is not spoken
            self._clauses = None
            self._stage_failed(e, tr)
            return False
        if chunk is None:
            self._clauses = None
            if "tts_first_chunk" not in tr.t_ns:
                tr.dropped = "nothing to speak in the translation"
            self._close(tr)
            return False
        self._errors_in_row = 0  # every stage worked on this utterance
        first = "tts_first_chunk" not in tr.t_ns
        if first:
            tr.stamp("tts_first_chunk", self.source.clock.now_ns())
        self._speech.add(tr, samples, first)
        self._shed_output()
        self._speech.push()
        return True

    def _finish_previous(self) -> None:
        """A new translation is ready: speak the previous one's remaining clauses first, or skip them if behind."""
        if self._clauses is None:
            return
        if self.options.overload.shorten(self._output_backlog_s()):
            self.overload.tails_skipped += 1
            while self._clause_open and self._next_clause():  # a streamed clause is not cut mid-word
                pass
            self._clauses = None
            self._close(self._clause_trace)
            return
        while self._next_clause():
            pass

    def _shed_output(self) -> None:
        """Level 3 on the output side: drop the oldest queued utterance's unplayed speech while far behind."""
        while self.options.overload.drop(self._output_backlog_s()) and (oldest := self._speech.drop_oldest()):
            self.overload.speech_dropped += 1
            if "first_output" not in oldest.t_ns:
                oldest.dropped = "overload: its speech was dropped from the output backlog"

    def _barge_in(self) -> None:
        """Speech started while translated speech plays: apply the barge-in policy (see output.py)."""
        policy = self.options.barge_in
        if policy == "continue" or not self._speech.playing():
            return
        self._barged = True
        if policy == "resay":
            self._current.resay = self._resumed()
        self._stop_speech(policy, "barge-in: its speech was stopped before it was heard")

    def _stop_speech(self, policy: str, why: str) -> None:
        """Apply ``policy`` to the speech that plays (SpeechQueue.barge_in); ``stop`` also ends the current
        translation's clause stream, and marks the utterances none of whose speech was heard with ``why``."""
        for tr in self._speech.barge_in(policy):
            tr.dropped = why
        if policy == "stop" and self._clauses is not None:  # the rest of that translation is not spoken
            self._clauses = None
            self._close(self._clause_trace)

    def _resumed(self) -> _Said | None:
        """barge_in "resay": what the utterance starting now may go on with: the latest translation spoken, when its
        utterance is the one right before this one and ended at most ``resay_within_s`` before this one started, and
        no older translation waits to be played (dropping the held speech drops all of it, in order: a translation
        already resaid had the older speech dropped; else its first sample has been played)."""
        said, now = self._said, self._current.trace
        if (said is None or said.trace.utterance != now.utterance - 1 or said.trace.dropped
                or now.start_sample - said.trace.end_sample > self.options.resay_within_s * SAMPLE_RATE
                or not (said.trace.resaid or "first_output" in said.trace.t_ns)):
            return None
        return said

    def _release(self, resay: _Said | None, resaid: bool) -> None:
        """End barge_in "resay"'s hold of the speech covering ``resay`` (None: the utterance held none): it plays on,
        or (``resaid``) is dropped for a translation of the whole sentence. Again after that: plays on."""
        if resay is None:
            return
        if resaid:
            self.resaid += 1
            self._stop_speech("stop", "resaid: its translation was spoken with the next utterance's")
        self._speech.resume()

    def _captured_at(self, sample: int) -> int:
        """The capture index of the loop's sample ``sample`` (the front end hands some audio back late)."""
        return sample - (self._frontend.lag_at(sample) if self._frontend is not None else 0)

    def _capture_lag_s(self) -> float:
        """Seconds of captured audio the worker has not read yet."""
        lag = self.source.ring.available() / SAMPLE_RATE
        self.overload.max_capture_lag_s = max(self.overload.max_capture_lag_s, lag)
        return lag

    def _output_backlog_s(self) -> float:
        """Seconds of translated speech synthesized but not played yet."""
        backlog = self._speech.backlog_s()
        self.overload.max_output_backlog_s = max(self.overload.max_output_backlog_s, backlog)
        return backlog

    def _advance_output(self) -> bool:
        """Hand queued speech to the sink and synthesize the next clause; True if it did work."""
        self._speech.push()
        self.published.flush()
        if self._clauses is not None and not self._speech:
            return self._next_clause()
        return False

    def _close(self, tr: UtteranceTrace) -> None:
        self.published.close(tr)

    def _finish(self, drain_timeout_s: float = 30.0) -> None:
        """End of stream: hear what was captured before the stop, close the open utterance, speak what is left."""
        for _ in range(self.source.ring.available() // VAD_FRAME):  # bounded: what is there now, not what comes
            self._step()
        for event in self.endpointer.flush(self.history.end // VAD_FRAME):
            self._on_event(event)
        deadline = time.monotonic() + drain_timeout_s
        played, progress = -1, time.monotonic()
        while (self._clauses is not None or self._speech or self.sink.pending()) and time.monotonic() < deadline:
            if self._advance_output():
                continue
            if self.sink.pending() != played:
                played, progress = self.sink.pending(), time.monotonic()
            elif time.monotonic() - progress > 1.0:
                break  # the device stopped playing (it is gone): waiting for it would only delay the reopen
            time.sleep(0.01)
        # let the device play the last samples so first_output marks fire
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        self.published.flush(force=True)


def _has_words(hyp: Hypothesis) -> bool:
    """Whether ``hyp`` says anything: not "" and not a lone "." on noise."""
    return has_words(hyp.text or hyp.translation)
