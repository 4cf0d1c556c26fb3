"""The capture front end: WebRTC echo cancellation (and optional noise suppression) on the worker side.

It runs on the loop's worker, on each 32 ms hop before the VAD, never in an audio callback. The echo
canceller's far-end reference is what the sink really played (its :class:`~edge_rt.audio.sinks.PlaybackTap`),
taken at the times the capture hop was heard: both rings carry sample clocks on the same monotonic
time, so capture index -> time -> played index (see :class:`FarEnd`).

WebRTC processes 10 ms frames (160 samples) and a hop is 512 samples, which is not a multiple: the
front end keeps the remainder (< 160 samples) for the next hop and hands out processed audio with a fixed
delay of :data:`DELAY` samples (10 ms), so every hop gets exactly as many processed samples as it brought.
The cleaned audio is 10 ms later than the capture, 18 ms with echo cancellation on (AEC3 itself delays it by
:data:`AEC3_LAG`: measured, tests/audio): :attr:`FrontEnd.lag`. The loop's sample indices are the output's: the VAD,
the endpointer and every decode read the same history (a decode hears what the VAD framed), and the trace's times
are taken :meth:`FrontEnd.lag_at` samples earlier (``lag`` while cleaned, 0 while passed through in time), when that
audio was captured.

Pass-through: where nothing of ours can be in the capture (the far end silent for ``passthrough_after_ms``), the
front end hands out the capture itself, as it comes (``passthrough_in_time``), so the VAD, the endpointer and
Whisper get what a headset gives them, when a headset gives it; AEC3 still processes every frame, and its output
takes over at the first hop whose far end carries sound, before that sound's echo can reach the microphone. The
stream's lag is then 0 while it passes through and ``lag`` while it is processed (:meth:`FrontEnd.lag_at`): where
the output takes over, its first ``lag`` samples are the pass-through's last ones again, cleaned; where the pass-
through takes over again (only while no utterance is open), ``lag`` samples of the capture are not handed out.

Reference floor: AEC3 is given the far end plus fixed noise at ``reference_floor_dbfs`` (-100 dBFS), never exact zeros:
on zeros, once it has heard its loudspeaker, it costs ~15x per frame (tools/frontend_cost.py). Only AEC3 hears the
floor; the echo gate and the passthrough read the far end as played.

Echo gate: where AEC3 leaves a residual of our own speech, the endpointer must not open on it. While the
tap shows our speech (or did within ``echo_gate_hold_ms``), a hop whose cleaned energy is below the far
end's by more than ``echo_gate_db`` is echo, not a talker (:attr:`FrontEnd.echo`); the loop reads it
as silence until an utterance has opened (the VAD hears zeros there). All buffers are
allocated at start; the only allocation per hop is the array pywebrtc-audio returns (and soxr's, when the
sink runs at another rate than 16 kHz).

Optional dependency: ``pip install pywebrtc-audio==0.2.0`` (Apache-2.0; a dependency of edge-rt).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from edge_rt.audio.clock import CaptureClock
from edge_rt.errors import EdgeRtError
from edge_rt.loop.history import History
from edge_rt.units import SAMPLE_RATE, VAD_FRAME, VAD_FRAME_MS, exact_div

__all__ = ["AEC3_LAG", "DELAY", "FRAME", "FarEnd", "FrontEnd", "FrontEndOptions"]

FRAME = exact_div(SAMPLE_RATE, 100)  # 160 samples: WebRTC's 10 ms frame
# Processed audio lags the hop by one frame: a hop of any length leaves < 160 samples unprocessed, so
# every hop can be answered in full (512-sample hops alone would need 128: 512 k mod 160 <= 128).
DELAY = FRAME
# AEC3 hands back the capture this much later again (its 64-sample block framing; measured with a silent
# far end on en_jfk: the output correlates 0.98 with the input at DELAY + 128 samples, tests/audio).
AEC3_LAG = 128
FAR_HISTORY = 1 << 17  # 8.2 s of played audio at 16 kHz, as long as the sink's tap keeps
# The reference is read on as one continuous stream and re-aligned to the clocks only when they disagree by
# more than this: callback times jitter by milliseconds and soxr's delay by a sample, and each jump in the
# reference costs AEC3 cancellation (a 48 kHz sink aligned per hop lost ~15 dB of its 33 dB on en_jfk).
RESYNC = 20 * SAMPLE_RATE // 1000  # 320 samples (20 ms)


@dataclass(frozen=True)
class FrontEndOptions:
    # AEC3 with the sink's played samples as reference. On a digital 6 dB / 40 ms loop-back of en_jfk
    # it removes 34 dB of echo after ~2 s of convergence (9 dB in the first 2 s); with nothing playing
    # it passes speech through, so it costs only compute on a headset.
    echo_cancellation: bool = True
    # WebRTC's noise suppressor. Off: its effect on Whisper's WER in noise is not measured yet (issue 11),
    # and spectral suppression is known to remove cues Whisper uses; turn on only with numbers.
    noise_suppression: bool = False
    ns_level: int = 1  # 0..3 = 6, 12, 18, 21 dB of suppression, when noise_suppression is on
    # WebRTC's 80 Hz high-pass (AEC turns it on anyway): removes rumble and DC Whisper does not need.
    high_pass_filter: bool = True
    # Delay hint for AEC3 (ms): a loudspeaker next to the microphone through a sound card; AEC3 finds the
    # real delay itself (its estimator covers several hundred ms), the hint only speeds up convergence.
    stream_delay_ms: int = 40
    # Echo gate (None: off). Offline (G2c's sim: Piper pt speech of en_jfk played, heard 6 dB down and
    # 40 ms + 40 ms late, tiny pack's VAD), AEC3 leaves every echo-only hop at least 42.5 dB under the far
    # end (99th percentile 46 dB); a talker as loud as the echo comes through at 0 to -30 dB in most hops
    # of double talk once AEC3 lets it through (-70 dB while its suppressor holds it). -38 dB: 4.5 dB
    # over the worst echo-only hop; below it the endpointer may not open. Tuned on the simulated mix,
    # not on the live test's clips.
    echo_gate_db: float | None = -38.0
    # The gate stays armed this long after the tap last showed our speech: AEC3's residual lingers for
    # the room's (here: the loop-back's) tail, and a 0.37 s self-utterance opened right after our last
    # clause in G2b's last run of tests/loop/test_loudspeaker_jack.py.
    echo_gate_hold_ms: int = 512
    # AEC3 converges over its first ~1.5 s of our speech, and its residual then comes through in bursts the
    # gate cannot call echo: in the offline mix above, runs of 6 and 3 hops at 0.8 and 1.18 s of playback, single
    # hops after it. Until the tap has shown `converging_s` of our speech, an utterance opens while we play
    # only after `converging_open_hops` hops in a row that are not echo (7 x 32 ms: longer than the worst
    # run). Cost, in the same mix with a talker over our speech from 0.5 s: the talker can open an utterance
    # at 864 ms instead of 352 ms (the pre-roll keeps 192 ms, so its first ~0.3 s may be cut); after
    # convergence, unchanged. Live, a 0.32 s "Go" of our own voice opened 0.83 s into our third reply of a
    # run, after ~1.6 s of playback in all (tests/loop/test_loudspeaker_jack.py, 2026-12-03; 2
    # self-translations in 5 runs before, 0 in 3 after). 0: no such wait. Chosen on the offline mix, not on
    # the live test's clips. The wait starts again when an utterance that opened over our speech held no word
    # (FrontEnd.reconverge, called by the loop).
    converging_s: float = 1.5
    converging_open_hops: int = 7
    # The ready tone (audio/tone.py), played once when the loop starts with a sink that records what it plays:
    # a 200-6000 Hz sweep this long, at this level (dBFS RMS; the pack's Piper voices gave -18.8 and -21.0 dBFS
    # on a Portuguese and an English sentence). 0: none. Until AEC3 has heard its loudspeaker in the microphone
    # it takes a talker down under the first far end as if it were double talk; after the sweep it does not.
    # Offline (tools/ready_tone.py: en_jfk talking, a 2-s reply starting 3 s in, a generated room echo path, 6 dB
    # down, 40 ms + a 15 ms decaying tail), the talker under our first reply comes out 25.1 dB down with no tone
    # (31.0 in the reply's first 0.75 s), 6.7 / 3.3 / 3.3 dB with 300 / 500 / 1000 ms (4.5 / 0.8 / 0.9): 500 ms
    # is the shortest at the floor. Chosen on that generated mix, not on the bench's clips or the live test's.
    # The loop plays it once, at start.
    ready_tone_ms: int = 500
    ready_tone_db: float = -20.0
    # Where nothing of ours can be in the capture, the front end hands out the capture itself (as late as its output,
    # so nothing downstream sees a jump): the far end silent for this long (None: always its output). With nothing
    # to cancel, AEC3's filtering and the high-pass still moved the VAD and Whisper off what a headset gives them:
    # offline, the same French sentence with nothing played (fr_fleurs_test_000) ended in a sentence-final mark of
    # 0.64 as captured and 0.34 through AEC3, and in `bench --loudspeaker` the turn policy held four clean clips of
    # the 33 to max_pause (1.1 s) that the headset run ended "complete" (fr_fleurs_ski 608 -> 1108 ms). With noise
    # suppression on, the output always (suppression is meant for Whisper). 320 ms: the 40-ms loop-back, a sound
    # card's output latency and a room's tail to ~30 dB down; not tuned.
    passthrough_after_ms: int | None = 320
    # The pass-through hands out the capture as it comes, not `lag` samples late like the processed output: a
    # turn's end, nearly always said with nothing of ours playing, reaches the VAD 18 ms sooner. In `bench
    # --loudspeaker --peer` (2026-12-07, 33 clips, before this option) every clip without talk-over ended its
    # turn 13.3-18.2 or 35.0-38.1 ms later in loudspeaker mode than with a headset (median +17.9 ms of 32 paired:
    # 288 samples, the lag, or that and one more hop). Interleaved with it on and off (tools/loop_ab.py --vary
    # loudspeaker=off,on-late,on --no-paused, 2026-12-07, 28 min): on the 20 clips with no talk-over in any setting,
    # loudspeaker mode's turn against the headset's +18 ms (median) as late, 0 ms in time (13 of 20 within 1 ms); over
    # all 33, P50 x1.150 -> x1.077, per-clip median x1.017 -> x1.000. Not a tuned value: it removes a delay.
    # False: as late as the output (the stream never jumps).
    passthrough_in_time: bool = True
    # A floor of noise added to the reference AEC3 is given (RMS in dBFS; None: none). Where nothing of ours plays
    # the reference is exact zeros, and once AEC3 has heard its loudspeaker (the ready tone) a frame of zeros costs
    # it ~15x what a frame of sound does on x86 (most likely denormal floats as its filter states decay): offline,
    # `python tools/frontend_cost.py`, a person talking after the tone with nothing of ours playing, 3.59 ms per
    # 32-ms hop against 0.24-0.25 ms with a floor at -140, -120 or -100 dBFS; in the loop 2.6-4.7 ms per hop, on the
    # worker in front of the VAD (en_fleurs_1728 in loudspeaker mode: the worker reached the pause 59 ms behind the
    # capture, 14 ms with a headset). The cancellation is the same with any of the three (echo taken down 41.0 dB,
    # the talker under our reply -1.1 / -1.2 dB; tools/ready_tone.py's talker under our first reply after the tone
    # -0.8 -> -1.3 dB in its first 0.75 s, -3.3 -> -3.7 dB over 2 s, with and without the floor at -100). -100: tens
    # of dB under any microphone's own noise; -120 and -140 moved one hop of 877 in the echo gate's test scene over 8
    # played clips (en_jfk at 2.0 s, while AEC3 converges) from echo to not echo, -100 none. Chosen on those
    # generated scenes, not on the bench's clips.
    reference_floor_dbfs: float | None = -100.0

    def __post_init__(self):
        if not 0 <= self.ns_level <= 3:
            raise ValueError(f"ns_level must be 0..3 (6, 12, 18, 21 dB), got {self.ns_level}")
        if not 0 <= self.stream_delay_ms <= 500:
            raise ValueError(f"stream_delay_ms must be 0..500, got {self.stream_delay_ms}")
        if self.echo_gate_db is not None and not -80.0 <= self.echo_gate_db <= 0.0:
            raise ValueError(f"echo_gate_db must be -80..0 dB (under the far end) or None, got {self.echo_gate_db}")
        if not VAD_FRAME_MS <= self.echo_gate_hold_ms <= 5000:
            raise ValueError(f"echo_gate_hold_ms must be {VAD_FRAME_MS}..5000, got {self.echo_gate_hold_ms}")
        if not 0.0 <= self.converging_s <= 30.0 or not 0 <= self.converging_open_hops <= 64:
            raise ValueError(f"converging_s must be 0..30 s and converging_open_hops 0..64, got "
                             f"{self.converging_s} and {self.converging_open_hops}")
        if not 0 <= self.ready_tone_ms <= 5000 or not -60.0 <= self.ready_tone_db <= -3.0:
            raise ValueError(f"ready_tone_ms must be 0..5000 and ready_tone_db -60..-3 dBFS, got "
                             f"{self.ready_tone_ms} and {self.ready_tone_db}")
        if self.reference_floor_dbfs is not None and not -200.0 <= self.reference_floor_dbfs <= -60.0:
            raise ValueError(f"reference_floor_dbfs must be -200..-60 dBFS or None (no floor), "
                             f"got {self.reference_floor_dbfs}")
        if self.passthrough_after_ms is not None and not 0 <= self.passthrough_after_ms <= 5000:
            raise ValueError(f"passthrough_after_ms must be 0..5000 ms or None (always the front end's output), "
                             f"got {self.passthrough_after_ms}")

    @property
    def lag(self) -> int:
        """Samples the front end's processed output lies behind its capture index (see :attr:`FrontEnd.lag`)."""
        return DELAY + (AEC3_LAG if self.echo_cancellation else 0)

    @property
    def passing_lag(self) -> int:
        """The stream's lag while nothing of ours plays: 0 where the capture passes through in time, else :attr:`lag`.

        The pass-through needs a far end to listen to (echo cancellation) and no noise suppression."""
        passes = self.passthrough_after_ms is not None and self.echo_cancellation and not self.noise_suppression
        return 0 if passes and self.passthrough_in_time else self.lag


_SILENT_MS = 1e-8  # a far-end hop's mean square below this (-80 dBFS) is silence: nothing of ours played
_FLOOR = 1 << 12  # samples of the reference floor's noise, read round and round (FrontEndOptions.reference_floor_dbfs)
_SWITCHES = 64  # changes of the stream's lag remembered by FrontEnd.lag_at (older ones: the oldest remembered lag)


def _processor(options: FrontEndOptions):
    try:
        from pywebrtc_audio import AudioProcessor
    except ImportError as e:
        raise EdgeRtError(f"the audio front end (echo cancellation) needs pywebrtc-audio ({e}); "
                          f"`pip install pywebrtc-audio==0.2.0`, or run without it (no --loudspeaker)") from e
    return AudioProcessor(sample_rate=SAMPLE_RATE, num_channels=1, echo_cancellation=options.echo_cancellation,
                          noise_suppression=options.noise_suppression, high_pass_filter=options.high_pass_filter,
                          auto_gain_control=False, ns_level=options.ns_level,
                          stream_delay_ms=options.stream_delay_ms)


class FarEnd:
    """What the sink played, at 16 kHz, addressable by the monotonic time it was heard.

    ``tap`` is the sink's :class:`~edge_rt.audio.sinks.PlaybackTap` (ring + clock at the sink's rate).
    :meth:`read` must be called from the worker only (it resamples what the callback recorded).
    """

    def __init__(self, tap, capacity: int = FAR_HISTORY):
        from edge_rt.audio.devices.base import ResamplingRing

        self.clock = CaptureClock()  # 16 kHz played index <-> time heard
        self._ring = ResamplingRing(tap.ring, tap.clock, self.clock, capacity=1 << 16)
        self._played = History(capacity)  # played sample i, by its 16 kHz index
        self._next: int | None = None  # played index the next read continues from
        self.resyncs = 0  # times the reference was re-aligned to the clocks
        # Reference samples asked for before the sink had played them (read as silence): the device's output
        # latency must cover the resampler's delay (~20 ms from 48 kHz) for the reference to be complete.
        self.late = 0
        self._chunk = np.empty(4096, np.float32)

    def _pull(self) -> None:
        while True:
            first, n = self._ring.read_into(self._chunk)
            if n == 0:
                return
            self._played.write(first, self._chunk[:n])

    def read(self, t_ns: int, out: np.ndarray) -> None:
        """Fill ``out`` with the samples heard from ``t_ns`` on (zeros where nothing was recorded)."""
        self._pull()
        a = self.clock.index(t_ns)
        if self._next is not None and abs(a - self._next) <= RESYNC:
            a = self._next
        elif self._next is not None:
            self.resyncs += 1
        self._next = b = a + len(out)
        lo, hi = self._played.read_into(a, out)
        if hi > lo and b > self._played.end:
            self.late += b - max(hi, a)


class FrontEnd:
    """Echo cancellation (+ high-pass, optional noise suppression) of 512-sample hops, in place.

    ``clock`` is the capture clock (index -> time captured); ``far`` the played audio (None: no sink
    that records what it plays, so the canceller gets silence as reference and only filters).
    """

    def __init__(self, options: FrontEndOptions, clock: CaptureClock, far: FarEnd | None = None):
        self.options = options
        self._ap = _processor(options)
        self._clock = clock
        self._far = far
        self._near = np.zeros(VAD_FRAME + FRAME, np.float32)  # unprocessed: remainder + one hop
        self._ref = np.zeros(VAD_FRAME + FRAME, np.float32)  # the far end aligned with _near
        self._pending = 0
        self._out = np.zeros(2 * VAD_FRAME, np.float32)  # processed, not handed out yet (a FIFO)
        self._ready = DELAY  # the fixed delay: the first hop starts with DELAY samples of silence
        self.hops = 0
        # Echo gate: the far end's mean square in the last hops (a ring), the threshold as a power ratio.
        self._far_ms = np.zeros(-(-options.echo_gate_hold_ms // VAD_FRAME_MS), np.float64)
        self._gate = None if options.echo_gate_db is None or far is None else 10.0 ** (options.echo_gate_db / 10)
        self.echo = False  # the last hop is our own speech's residual, not a talker (see the module doc)
        self.echo_hops = 0  # hops the gate called echo
        # While AEC3 converges (FrontEndOptions.converging_s): hops of our speech the tap has shown so far, and
        # hops in a row, while we play, that the gate did not call echo.
        self._played_hops = 0
        self._converged_hops = int(options.converging_s * 1000 / VAD_FRAME_MS)
        self._not_echo_run = 0
        self.held = False  # the last hop may be a talker but AEC3 has not converged: do not open on it yet
        # Passing the capture through where nothing of ours played (FrontEndOptions.passthrough_after_ms): one past
        # the capture index of the last hop whose far end carried sound (None: none yet), and how many hops were handed
        # out as captured.
        self._pass_after = (None if options.passthrough_after_ms is None or far is None or options.noise_suppression
                            else options.passthrough_after_ms * SAMPLE_RATE // 1000)
        self.far_until: int | None = None
        self.passed = False  # the last hop was handed out as captured
        self.passed_hops = 0
        # The stream's lag (0 while passing through in time, else `lag`) and where it last changed: a ring of
        # (first output index at the new lag, that lag), newest last, for lag_at().
        self._in_time = self._pass_after is not None and options.passthrough_in_time
        self._shift = 0 if self._in_time else options.lag
        self._switch_at = np.zeros(_SWITCHES, np.int64)
        self._switch_lag = np.zeros(_SWITCHES, np.int64)
        self.switches = 0
        # passthrough_in_time False: the last `lag` captured samples (the delay line the pass-through is read from)
        self._raw = None if self._in_time else np.zeros(options.lag + VAD_FRAME, np.float32)
        # The reference's floor (FrontEndOptions.reference_floor_dbfs): fixed noise, added to what AEC3 is given only
        # (the echo gate and the passthrough read the far end as played), and the time spent processing.
        self._floor = None
        if far is not None and options.reference_floor_dbfs is not None:
            noise = np.random.default_rng(0).standard_normal(_FLOOR + VAD_FRAME + FRAME)
            self._floor = (noise * 10 ** (options.reference_floor_dbfs / 20)).astype(np.float32)
        self._floor_at = 0
        self.busy_ns = 0  # time spent in process(), for bench (its per-hop cost on the worker)

    def reconverge(self) -> None:
        """Hold openings again as while AEC3 first converged (the next ``converging_s`` of our speech).

        The loop calls it when an utterance that opened over our speech (a barge-in) held no word: a residual
        of our own voice passed the echo gate, so AEC3 no longer cancels as it did. Live
        (tests/loop/test_loudspeaker_jack.py, 2026-12-03, one run in a full test run here) that went round in
        a circle: after a pause for JFK talking over our first reply, each time our speech resumed an
        utterance opened on its echo 40-100 ms later (5 times in 6 s), paused it again for up to a second,
        and the fourth was heard as "Thank you." and translated. The first reply had played 2 s, past the
        first wait.
        """
        self._played_hops = 0
        self._not_echo_run = 0

    @property
    def lag(self) -> int:
        """Samples the cleaned audio lies behind its capture index: what was heard at index i is at i + lag."""
        return self.options.lag

    def lag_at(self, index: int) -> int:
        """Samples the stream lay behind the capture at output ``index``: sample ``index`` was heard at
        ``index - lag_at(index)`` (0 while the capture passed through in time, else :attr:`lag`)."""
        for k in range(self.switches - 1, max(self.switches - _SWITCHES, 0) - 1, -1):
            if self._switch_at[k % _SWITCHES] <= index:
                return int(self._switch_lag[k % _SWITCHES])
        if self.switches > _SWITCHES:  # before the oldest change remembered: the lag it left
            return int(self.options.lag - self._switch_lag[self.switches % _SWITCHES])
        return 0 if self._in_time else self.options.lag

    @property
    def cancels_echo(self) -> bool:
        """Echo cancellation runs with the sink's playback as far end (so a ready tone can train it)."""
        return self._far is not None

    @classmethod
    def for_loop(cls, options: FrontEndOptions, clock: CaptureClock, sink) -> "FrontEnd":
        """The front end of a loop whose sink may record what it plays (``sink.tap``, see sinks.py)."""
        tap = getattr(sink, "tap", None)
        return cls(options, clock, FarEnd(tap) if tap is not None and options.echo_cancellation else None)

    def _note_lag(self, first: int, lag: int) -> None:
        """The stream's lag from output index ``first`` on (remembered for :meth:`lag_at` where it changes)."""
        if lag != self._shift:
            k = self.switches % _SWITCHES
            self._switch_at[k], self._switch_lag[k] = first, lag
            self.switches += 1
            self._shift = lag

    def process(self, first: int, hop: np.ndarray, speaking: bool = False) -> None:
        """Replace ``hop`` (capture samples from index ``first``) by the front end's output, ``lag`` samples older:
        processed, or the capture itself where nothing of ours played (``passthrough_after_ms``; in time with
        ``passthrough_in_time``). ``speaking``: an utterance is open, so a pass-through in time does not take over
        yet (it would leave out ``lag`` samples of it)."""
        t0 = time.perf_counter_ns()
        n, p = len(hop), self._pending
        self._near[p : p + n] = hop
        lag = self.options.lag
        if self._far is not None:
            ref = self._ref[p : p + n]
            self._far.read(self._clock.ns(first), ref)
            self._far_ms[self.hops % len(self._far_ms)] = far_ms = float(np.dot(ref, ref)) / max(n, 1)
            if far_ms > _SILENT_MS:
                self.far_until = first + n
        m = (p + n) // FRAME * FRAME
        if m:
            if self._floor is not None:
                o = self._floor_at
                np.add(self._ref[:m], self._floor[o : o + m], out=self._ref[:m])
                self._floor_at = (o + m) % _FLOOR
            y = self._ap.process(self._near[:m], self._ref[:m] if self._far is not None else None)
            self._out[self._ready : self._ready + m] = y
            self._ready += m
            rest = p + n - m
            self._near[:rest] = self._near[m : p + n]
            self._ref[:rest] = self._ref[m : p + n]
            self._pending = rest
        else:
            self._pending = p + n
        if self._in_time:  # the capture itself, as it comes: from the far end's last sound on, as heard now
            quiet = self.far_until is None or self.far_until + self._pass_after <= first
            self.passed = quiet and (self.passed or not speaking)
            if not self.passed:
                hop[:] = self._out[:n]
            self._note_lag(first, 0 if self.passed else lag)
        else:  # as late as the output: the delay line holds capture [first - lag, first + n)
            self._raw[lag : lag + n] = hop
            self.passed = self._pass_after is not None and (self.far_until is None
                                                            or self.far_until + self._pass_after <= first - lag)
            hop[:] = self._raw[:n] if self.passed else self._out[:n]
            self._raw[:lag] = self._raw[n : n + lag]
        self.passed_hops += self.passed
        self._out[: self._ready - n] = self._out[n : self._ready]
        self._ready -= n
        self.hops += 1
        if self._gate is not None:
            far_max = float(self._far_ms.max())
            self.echo = float(np.dot(hop, hop)) / max(n, 1) < self._gate * far_max
            self.echo_hops += self.echo
            playing = far_max > _SILENT_MS
            self._played_hops += self._far_ms[(self.hops - 1) % len(self._far_ms)] > _SILENT_MS
            self._not_echo_run = self._not_echo_run + 1 if playing and not self.echo else 0
            self.held = (playing and not self.echo and self._played_hops < self._converged_hops
                         and self._not_echo_run < self.options.converging_open_hops)
        self.busy_ns += time.perf_counter_ns() - t0
