"""The capture front end: exact 10 ms framing with a fixed delay, and echo cancellation against what a sink
really played, aligned through the two sample clocks (real speech clips, real WebRTC AEC3)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.clock import CaptureClock
from edge_rt.audio.files import read_audio
from edge_rt.audio.frontend import AEC3_LAG, DELAY, FRAME, FrontEnd, FrontEndOptions
from edge_rt.audio.sinks import RingSink
from edge_rt.units import SAMPLE_RATE, VAD_FRAME

pytest.importorskip("pywebrtc_audio", reason="pip install pywebrtc-audio==0.2.0 (a dependency of edge-rt)")

T0 = 10**12  # ns: an arbitrary monotonic origin
OUT_LATENCY = 640  # 16 kHz samples (40 ms): a PortAudio output stream's latency with 20 ms buffers


def _db(x: np.ndarray) -> float:
    return 10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-12)


def test_hops_come_back_whole_and_exactly_one_frame_late(speech_dir):
    """With every filter off, WebRTC passes audio through: the output is the input DELAY samples later,
    for 512-sample hops and for odd lengths (a torn read) alike."""
    x = read_audio(speech_dir / "en_jfk.wav")[: 3 * SAMPLE_RATE]
    fe = FrontEnd(FrontEndOptions(echo_cancellation=False, high_pass_filter=False), CaptureClock())
    out, pos = [], 0
    for n in [VAD_FRAME] * 40 + [300, 17, VAD_FRAME, 159] + [VAD_FRAME] * 40:
        hop = x[pos : pos + n].copy()
        fe.process(pos, hop)
        out.append(hop)
        pos += n
    y = np.concatenate(out)
    assert DELAY == FRAME == 160
    np.testing.assert_array_equal(y[:DELAY], 0)
    np.testing.assert_allclose(y[DELAY:], x[: pos - DELAY], atol=2 / 32768)


@pytest.mark.parametrize("sink_rate", [16000, 48000])
def test_echo_of_played_speech_is_cancelled_and_a_talker_is_kept(speech_dir, sink_rate):
    """A sink plays en_jfk; the microphone hears it 6 dB down and 40 ms late, plus a person (a LibriSpeech
    clip) who starts talking after the playback. The front end, fed by the sink's tap only, removes the echo
    (>= 20 dB once converged) and keeps the person (within 3 dB)."""
    far16 = read_audio(speech_dir / "en_jfk.wav")
    person = read_audio(speech_dir / "en_librispeech_1089-134686-0000.wav")[: 4 * SAMPLE_RATE]
    sink = RingSink(sink_rate, capacity=1 << 20)
    if sink_rate == SAMPLE_RATE:
        played = far16
    else:
        from edge_rt.audio.files import resample

        played = resample(far16, SAMPLE_RATE, sink_rate)
    assert sink.write(played.astype(np.float32)) == len(played)
    echo_delay = int(0.040 * SAMPLE_RATE)
    total = len(far16) + echo_delay + len(person) + SAMPLE_RATE
    near = np.zeros(total, np.float32)
    near[echo_delay : echo_delay + len(far16)] += 0.5 * far16
    p0 = len(far16) + echo_delay + SAMPLE_RATE // 2
    near[p0 : p0 + len(person)] += person
    clock = CaptureClock()
    clock.anchor(0, T0)  # capture sample i was heard at T0 + i / 16 kHz
    fe = FrontEnd.for_loop(FrontEndOptions(), clock, sink)
    block = sink_rate // 50  # a 20 ms device buffer
    buf = np.empty(block, np.float32)
    consumed = 0  # device-rate samples the sink has played
    out = np.zeros(total, np.float32)
    for first in range(0, total - VAD_FRAME + 1, VAD_FRAME):
        # the speaker callback runs ahead of the worker by the device's output latency: what is heard up to
        # OUT_LATENCY after this hop ends has gone to the device
        while consumed * SAMPLE_RATE < (first + VAD_FRAME + OUT_LATENCY) * sink_rate:
            sink.consume(buf, T0 + consumed * 1_000_000_000 // sink_rate)
            consumed += block
        hop = near[first : first + VAD_FRAME].copy()
        fe.process(first, hop)
        out[first : first + VAD_FRAME] = hop
    out = out[DELAY:]  # undo the front end's fixed delay
    converged = slice(3 * SAMPLE_RATE, len(far16))
    assert _db(near[converged]) - _db(out[converged]) >= 20, (_db(near[converged]), _db(out[converged]))
    assert fe._far.late == 0  # the reference was always there when the hop was processed
    talk = slice(p0, p0 + len(person))
    assert abs(_db(out[talk]) - _db(person)) <= 3, (_db(out[talk]), _db(person))


def test_options_are_validated():
    with pytest.raises(ValueError, match="ns_level"):
        FrontEndOptions(ns_level=4)
    with pytest.raises(ValueError, match="stream_delay_ms"):
        FrontEndOptions(stream_delay_ms=-1)
    with pytest.raises(ValueError, match="echo_gate_db"):
        FrontEndOptions(echo_gate_db=3.0)
    with pytest.raises(ValueError, match="echo_gate_hold_ms"):
        FrontEndOptions(echo_gate_hold_ms=0)
    with pytest.raises(ValueError, match="converging_open_hops"):
        FrontEndOptions(converging_open_hops=-1)
    for level in (-30.0, -250.0):
        with pytest.raises(ValueError, match="reference_floor_dbfs"):
            FrontEndOptions(reference_floor_dbfs=level)


def _frontend_run(near: np.ndarray, sink: RingSink, options: FrontEndOptions = FrontEndOptions(), speaking=None):
    """``near`` through a front end whose reference is ``sink``'s tap (16 kHz, played OUT_LATENCY ahead of the
    worker); returns the front end's output (processed: lag samples late), each hop's echo, held and passed flags, the
    front end. ``speaking(first)``: whether an utterance is open at the hop from ``first`` (None: never)."""
    clock = CaptureClock()
    clock.anchor(0, T0)
    fe = FrontEnd.for_loop(options, clock, sink)
    buf = np.empty(320, np.float32)
    consumed, out, flags = 0, np.zeros(len(near), np.float32), {"echo": [], "held": [], "passed": []}
    for first in range(0, len(near) - VAD_FRAME + 1, VAD_FRAME):
        while consumed < first + VAD_FRAME + OUT_LATENCY:
            sink.consume(buf, T0 + consumed * 1_000_000_000 // SAMPLE_RATE)
            consumed += len(buf)
        hop = near[first : first + VAD_FRAME].copy()
        fe.process(first, hop, speaking=bool(speaking and speaking(first)))
        out[first : first + VAD_FRAME] = hop
        for k, v in flags.items():
            v.append(getattr(fe, k))
    return out, {k: np.array(v) for k, v in flags.items()}, fe


def _run_with_sink(near: np.ndarray, sink: RingSink, options: FrontEndOptions = FrontEndOptions(), held: bool = False):
    """:func:`_frontend_run`'s output and echo flags (and held flags)."""
    out, flags, _ = _frontend_run(near, sink, options)
    return (out, flags["echo"], flags["held"]) if held else (out, flags["echo"])


def test_echo_cancellation_passes_clean_speech_aec3_lag_later(speech_dir):
    """Nothing played yet (an all-zero reference): AEC3 + high-pass hand the speech back whole, DELAY +
    AEC3_LAG samples late (the loop's history is that much behind its indices; tests the constant)."""
    x = read_audio(speech_dir / "en_jfk.wav")[: 4 * SAMPLE_RATE]
    y, echo = _run_with_sink(x, RingSink(SAMPLE_RATE), FrontEndOptions(passthrough_after_ms=None))
    assert not echo.any()  # nothing played: the gate never calls a hop echo
    lag = DELAY + AEC3_LAG
    seg = slice(SAMPLE_RATE, 3 * SAMPLE_RATE)
    at = {d: float(np.corrcoef(y[seg.start + d : seg.stop + d], x[seg])[0, 1]) for d in (DELAY, lag)}
    assert at[lag] > 0.9 and at[DELAY] < 0.5, at
    assert abs(_db(y[seg.start + lag : seg.stop + lag]) - _db(x[seg])) < 1.0


def test_where_nothing_was_played_the_capture_passes_through_as_it_comes(speech_dir):
    """Nothing played: the front end hands out the capture itself, as it comes (the VAD and Whisper hear what a
    headset gives them, when it gives it), or exactly ``lag`` samples late with ``passthrough_in_time`` off; not with
    passthrough off, nor with noise suppression on (meant for Whisper)."""
    x = read_audio(speech_dir / "en_jfk.wav")[: 3 * SAMPLE_RATE]
    lag = DELAY + AEC3_LAG
    assert FrontEndOptions().lag == lag and FrontEndOptions(echo_cancellation=False).lag == DELAY
    assert FrontEndOptions().passing_lag == 0 and FrontEndOptions(passthrough_in_time=False).passing_lag == lag
    m = len(x) // VAD_FRAME * VAD_FRAME  # the whole hops processed
    y, _, fe = _frontend_run(x, RingSink(SAMPLE_RATE))
    np.testing.assert_array_equal(y[:m], x[:m])
    assert fe.passed_hops == fe.hops and fe.switches == 0 and fe.lag_at(0) == fe.lag_at(m) == 0
    y, _, fe = _frontend_run(x, RingSink(SAMPLE_RATE), FrontEndOptions(passthrough_in_time=False))
    np.testing.assert_array_equal(y[:lag], 0)
    np.testing.assert_array_equal(y[lag:m], x[: m - lag])
    assert fe.passed_hops == fe.hops and fe.lag_at(m) == lag
    for options in (FrontEndOptions(passthrough_after_ms=None), FrontEndOptions(noise_suppression=True)):
        assert options.passing_lag == lag
        y, _ = _run_with_sink(x, RingSink(SAMPLE_RATE), options)
        assert np.abs(y[lag:m] - x[: m - lag]).max() > 0.01, options  # AEC3 and the high-pass change the waveform
    with pytest.raises(ValueError, match="passthrough_after_ms"):
        FrontEndOptions(passthrough_after_ms=-1)


def _played_then_a_person(speech_dir):
    """1 s of quiet, en_jfk played (4 s) and heard 6 dB down, 40 ms late, a person 1 s after it: (capture, a sink
    holding what it plays, the played speech, the capture indices it is played at, the echo's delay, where the person
    starts, the person)."""
    far16 = read_audio(speech_dir / "en_jfk.wav")[: 4 * SAMPLE_RATE]
    person = read_audio(speech_dir / "en_librispeech_1089-134686-0000.wav")[: 2 * SAMPLE_RATE]
    sink = RingSink(SAMPLE_RATE, capacity=1 << 20)
    quiet = SAMPLE_RATE  # the sink plays silence first (its tap records it: nothing of ours)
    assert sink.write(np.concatenate([np.zeros(quiet, np.float32), far16.astype(np.float32)])) == quiet + len(far16)
    d = int(0.040 * SAMPLE_RATE)
    played = slice(quiet, quiet + len(far16))  # the capture indices our speech is heard at (the tap's times)
    p0 = played.stop + d + SAMPLE_RATE
    near = np.zeros(p0 + len(person), np.float32)
    near[played.start + d : played.stop + d] += 0.5 * far16
    near[p0:] += person
    return near, sink, far16, played, d, p0, person


@pytest.mark.parametrize("in_time", [True, False])
def test_passthrough_stops_before_our_speech_is_heard_and_resumes_after_it(speech_dir, in_time):
    """1 s of quiet, then en_jfk played and heard 6 dB down, 40 ms late, then a person 1 s after it. The capture
    passes through until the first hop whose reference carries our speech (before its echo reaches the microphone),
    AEC3's output is handed out while it plays and for ``passthrough_after_ms`` after it, then the capture again:
    the person comes out as captured (as it comes, or ``lag`` samples late without ``passthrough_in_time``)."""
    near, sink, far16, played, d, p0, person = _played_then_a_person(speech_dir)
    options = FrontEndOptions(passthrough_in_time=in_time)
    out, flags, fe = _frontend_run(near, sink, options)
    passed = flags["passed"]
    lag = options.lag
    late_by = 0 if in_time else lag  # where the capture passes through
    far = np.zeros(len(near))
    far[played] = far16
    sounding = np.flatnonzero([np.mean(far[i : i + VAD_FRAME] ** 2) > 1e-8 for i in range(0, len(near), VAD_FRAME)])
    first_hop, last_hop = sounding[0], sounding[-1]
    assert passed[:first_hop].all() and not passed[first_hop : last_hop + 1].any()
    # the last hop passed through ends, in the capture, before the first sample of our speech, so before its echo
    assert first_hop * VAD_FRAME - lag <= np.flatnonzero(far)[0] + d
    assert fe.far_until == (last_hop + 1) * VAD_FRAME
    back = -(-(fe.far_until + options.passthrough_after_ms * SAMPLE_RATE // 1000 + late_by) // VAD_FRAME)
    assert not passed[last_hop : back].any() and passed[back:].all() and back * VAD_FRAME < p0
    m = len(near) // VAD_FRAME * VAD_FRAME  # the whole hops processed
    np.testing.assert_array_equal(out[p0 + late_by : m], person[: m - p0 - late_by])
    assert fe.passed_hops == int(passed.sum())
    # the stream's lag at each output index: lag while processed, else late_by; each change remembered
    assert [fe.lag_at(i) for i in (0, first_hop * VAD_FRAME - 1, first_hop * VAD_FRAME, back * VAD_FRAME - 1,
                                    back * VAD_FRAME, m)] == [late_by, late_by, lag, lag, late_by, late_by]
    assert fe.switches == (2 if in_time else 0)
    # while we play, AEC3's output: the echo taken down
    late = slice(played.start + 3 * SAMPLE_RATE, played.stop)
    assert _db(near[late]) - _db(out[late.start + lag : late.stop + lag]) >= 20


def test_the_capture_passes_through_in_time_again_only_once_no_utterance_is_open(speech_dir):
    """The same scene, with an utterance open from the end of our speech until the person's second word: AEC3's output
    is handed out until it closes (the pass-through would leave ``lag`` samples of it out), then the capture, as it
    comes, with no hop passed through while it was open."""
    near, sink, far16, played, d, p0, person = _played_then_a_person(speech_dir)
    talk = (played.stop, p0 + SAMPLE_RATE // 2)
    out, flags, fe = _frontend_run(near, sink, speaking=lambda first: talk[0] <= first < talk[1])
    passed, lag = flags["passed"], fe.lag
    back = -(-talk[1] // VAD_FRAME)  # the first hop after the utterance
    assert not passed[played.stop // VAD_FRAME : back].any() and passed[back:].all()
    m = len(near) // VAD_FRAME * VAD_FRAME
    np.testing.assert_array_equal(out[back * VAD_FRAME : m], near[back * VAD_FRAME : m])
    assert fe.lag_at(back * VAD_FRAME - 1) == lag and fe.lag_at(back * VAD_FRAME) == 0 and fe.switches == 2


def test_lag_at_remembers_the_last_changes_and_the_lag_before_them():
    """:meth:`FrontEnd.lag_at` over more changes of the stream's lag than it keeps: exact for the last 64, and before
    them the lag the oldest kept one left."""
    pytest.importorskip("pywebrtc_audio", reason="pip install pywebrtc-audio==0.2.0 (a dependency of edge-rt)")
    clock = CaptureClock()
    clock.anchor(0, T0)
    fe = FrontEnd.for_loop(FrontEndOptions(), clock, RingSink(SAMPLE_RATE))
    lag = fe.lag
    assert fe.lag_at(0) == 0
    for k in range(1, 101):  # processed from hop 10k on for odd k, passed through for even k
        fe._note_lag(10 * k * VAD_FRAME, lag if k % 2 else 0)
    assert fe.switches == 100
    assert [fe.lag_at(10 * k * VAD_FRAME + 5) for k in (99, 98, 37, 36)] == [lag, 0, lag, 0]
    assert fe.lag_at(0) == fe.lag_at(10 * 36 * VAD_FRAME + 5) == 0  # before the oldest kept (hop 370): hop 360's


def test_echo_gate_marks_our_residual_echo_and_never_a_talker_after_it(speech_dir):
    """en_jfk played and heard 6 dB down, 40 ms late; a person talks 1 s after it stopped. Every hop with
    the echo (and nothing else) is marked echo; no hop of the person, once the hold has run out, is."""
    far16 = read_audio(speech_dir / "en_jfk.wav")
    person = read_audio(speech_dir / "en_librispeech_1089-134686-0000.wav")[: 3 * SAMPLE_RATE]
    sink = RingSink(SAMPLE_RATE, capacity=1 << 20)
    assert sink.write(far16.astype(np.float32)) == len(far16)
    d = int(0.040 * SAMPLE_RATE)
    p0 = len(far16) + d + SAMPLE_RATE
    near = np.zeros(p0 + len(person), np.float32)
    near[d : d + len(far16)] += 0.5 * far16
    near[p0:] += person
    _, echo, held = _run_with_sink(near, sink, held=True)
    hop_far = np.array([_db(far16[i : i + VAD_FRAME]) for i in range(0, len(far16) - VAD_FRAME + 1, VAD_FRAME)])
    # hops where our speech is loud (in the clip's pauses, its -42 dB room noise is cancelled by only ~20
    # dB: not echo to the gate, and far too quiet for the VAD). In its first ~1.3 s AEC3 is still converging
    # (residual bursts 10-17 dB under the far end at 0.9-1.25 s): the gate does not cover that.
    playing = np.flatnonzero(hop_far > -30)
    playing = playing[playing * VAD_FRAME >= 3 * SAMPLE_RATE // 2]
    assert echo[playing].mean() >= 0.95, echo[playing].mean()
    hold = -(-FrontEndOptions().echo_gate_hold_ms * SAMPLE_RATE // (1000 * VAD_FRAME))
    talker = slice(p0 // VAD_FRAME + 1, len(echo))
    assert (len(far16) + d) // VAD_FRAME + hold < talker.start
    assert not echo[talker].any()
    assert not held[talker].any()  # nothing plays: the convergence wait never holds the talker back


def test_while_aec3_converges_no_utterance_opens_on_its_residual_bursts(speech_dir):
    """The same echo-only mix: in AEC3's first 1.5 s of our speech its residual comes through in runs of hops
    the gate cannot call echo (6 at 0.8 s, 3 at 1.18 s); held (FrontEnd.held) until converged, none of them
    can open an utterance. Without the wait they could (the test is not vacuous)."""
    far16 = read_audio(speech_dir / "en_jfk.wav")
    d = int(0.040 * SAMPLE_RATE)
    near = np.zeros(len(far16) + d + SAMPLE_RATE, np.float32)
    near[d : d + len(far16)] += 0.5 * far16
    hop_far = np.array([_db(far16[i : i + VAD_FRAME]) for i in range(0, len(far16) - VAD_FRAME + 1, VAD_FRAME)])
    early = np.flatnonzero(hop_far > -30)
    early = early[early * VAD_FRAME < 3 * SAMPLE_RATE // 2]  # the converging window
    opened = {}
    for hops in (FrontEndOptions().converging_open_hops, 0):
        sink = RingSink(SAMPLE_RATE, capacity=1 << 20)
        assert sink.write(far16.astype(np.float32)) == len(far16)
        _, echo, held = _run_with_sink(near, sink, FrontEndOptions(converging_open_hops=hops), held=True)
        opened[hops] = [round(i * VAD_FRAME / SAMPLE_RATE, 2) for i in early if not (echo[i] or held[i])]
    assert opened[FrontEndOptions().converging_open_hops] == [], opened
    assert len(opened[0]) >= 3, opened


def test_echo_gate_is_off_without_a_reference_or_when_disabled(speech_dir):
    far16 = read_audio(speech_dir / "en_jfk.wav")[: 3 * SAMPLE_RATE]
    sink = RingSink(SAMPLE_RATE, capacity=1 << 20)
    assert sink.write(far16.astype(np.float32)) == len(far16)
    near = np.concatenate([np.zeros(int(0.04 * SAMPLE_RATE), np.float32), 0.5 * far16])
    _, echo = _run_with_sink(near, sink, FrontEndOptions(echo_gate_db=None))
    assert not echo.any()
    fe = FrontEnd(FrontEndOptions(echo_cancellation=False), CaptureClock())  # no sink that records
    hop = near[SAMPLE_RATE : SAMPLE_RATE + VAD_FRAME].copy()
    fe.process(0, hop)
    assert not fe.echo


def test_reference_stays_aligned_on_a_slow_device_clock_with_a_lagging_worker(speech_dir):
    """The device clock runs 15 % slow (a JACK dummy driver on a loaded machine) and the worker reads each
    hop 3 s after it was captured (a long decode): capture index -> time -> played index must use the
    anchors of that time, not extrapolate from the newest; misaligned by ~0.45 s the echo stays."""
    far16 = read_audio(speech_dir / "en_jfk.wav")
    sink = RingSink(SAMPLE_RATE, capacity=1 << 20)
    assert sink.write(far16.astype(np.float32)) == len(far16)
    echo_delay = int(0.040 * SAMPLE_RATE)
    total = len(far16) + echo_delay
    near = np.zeros(total, np.float32)
    near[echo_delay:] += 0.5 * far16
    speed = 0.85  # device samples per nominal sample time
    block, lag = 320, 3 * SAMPLE_RATE

    def heard(i: int) -> int:  # ns at which device sample i (capture or playback) happens
        return T0 + int(i / speed * 1e9 / SAMPLE_RATE)

    clock = CaptureClock()
    fe = FrontEnd.for_loop(FrontEndOptions(), clock, sink)
    buf = np.empty(block, np.float32)
    out = np.zeros(total, np.float32)
    done = 0  # device periods run: capture and playback callbacks of the same period
    for first in range(0, total - VAD_FRAME + 1, VAD_FRAME):
        while done * block < min(first + VAD_FRAME + lag, total):
            sink.consume(buf, heard(done * block))  # played sample j is heard with capture sample j
            clock.anchor(done * block + block - 1, heard(done * block + block - 1))
            done += 1
        hop = near[first : first + VAD_FRAME].copy()
        fe.process(first, hop)
        out[first : first + VAD_FRAME] = hop
    out = out[DELAY:]
    converged = slice(3 * SAMPLE_RATE, len(far16) - DELAY)
    assert _db(near[converged]) - _db(out[converged]) >= 20, (_db(near[converged]), _db(out[converged]))
    assert fe._far.resyncs <= 1, fe._far.resyncs


def test_reconverge_holds_openings_again_after_the_first_wait_is_over(speech_dir):
    """Our speech plays on past the first wait (converging_s) and a short burst the gate cannot call echo comes
    through while it is loud (5 hops of another voice, shorter than the talker run that opens: what a residual of
    ours looks like to the gate; AEC3's suppressor takes its first hops). After the first wait nothing holds the
    hops that pass the gate; after ``reconverge()`` (the loop calls it when an utterance opened over our speech
    held no word) they are held, as at the start."""
    far16 = read_audio(speech_dir / "en_jfk.wav")
    other = read_audio(speech_dir / "en_librispeech_1089-134686-0000.wav")
    d = int(0.040 * SAMPLE_RATE)
    near = np.zeros(len(far16) + d, np.float32)
    near[d:] += 0.5 * far16
    hop_far = np.array([_db(far16[i : i + VAD_FRAME]) for i in range(0, len(far16) - VAD_FRAME + 1, VAD_FRAME)])
    # 5 hops, past 3 s of our speech, where it has been loud for the 8 hops before and stays loud
    n = 5
    b = next(i for i in range(3 * SAMPLE_RATE // VAD_FRAME, len(hop_far) - n) if (hop_far[i - 8 : i + n] > -30).all())
    hops = range(b, b + n + 1)  # and the hop after (AEC3 hands the capture back 18 ms late)
    loud = next(i for i in range(0, len(other) - n * VAD_FRAME, VAD_FRAME) if _db(other[i : i + n * VAD_FRAME]) > -25)
    near[b * VAD_FRAME : (b + n) * VAD_FRAME] += other[loud : loud + n * VAD_FRAME]
    flags = {}
    for again in (False, True):
        sink = RingSink(SAMPLE_RATE, capacity=1 << 20)
        assert sink.write(far16.astype(np.float32)) == len(far16)
        clock = CaptureClock()
        clock.anchor(0, T0)
        fe = FrontEnd.for_loop(FrontEndOptions(), clock, sink)
        buf = np.empty(320, np.float32)
        consumed, out = 0, []
        for k, first in enumerate(range(0, len(near) - VAD_FRAME + 1, VAD_FRAME)):
            while consumed < first + VAD_FRAME + OUT_LATENCY:
                sink.consume(buf, T0 + consumed * 1_000_000_000 // SAMPLE_RATE)
                consumed += len(buf)
            if again and k == b - 16:  # our speech resumed half a second before the burst
                fe.reconverge()
            hop = near[first : first + VAD_FRAME].copy()
            fe.process(first, hop)
            out.append((bool(fe.echo), bool(fe.held)))
        flags[again] = [out[i] for i in hops]
    assert b * VAD_FRAME / SAMPLE_RATE > FrontEndOptions().converging_s
    passed = [i for i, (echo, _) in enumerate(flags[False]) if not echo]
    assert passed and [flags[True][i][0] for i in passed] == [False] * len(passed), flags  # the same hops pass
    assert not any(flags[False][i][1] for i in passed), flags  # past the first wait: they could open an utterance
    assert all(flags[True][i][1] for i in passed), flags  # after reconverge() they cannot


def test_the_ready_tone_lets_a_talker_through_under_our_first_reply(speech_dir):
    """A kiosk: everything played is heard 6 dB down and 40 ms late. en_jfk talks; 3 s in, our first reply (2 s
    of en_fleurs_1938) starts over them. With no ready tone at start AEC3, which has never heard its loudspeaker,
    takes the talker down under it as double talk (-18 to -28 dB in its first 0.75 s, then it lets go); after the
    0.5-s tone (played 1 s before anyone talks, as the loop does) the talker comes through: the cleaned audio
    under the reply follows them."""
    from edge_rt.audio.tone import ready_tone

    talker = read_audio(speech_dir / "en_jfk.wav")[: 6 * SAMPLE_RATE]
    reply = read_audio(speech_dir / "en_fleurs_1938.wav")[: 2 * SAMPLE_RATE]
    reply = reply * (10 ** (-18 / 20) / np.sqrt(np.mean(reply**2)))
    options = FrontEndOptions()
    under = {}
    for tone_ms in (options.ready_tone_ms, 0):
        tone = ready_tone(SAMPLE_RATE, tone_ms, options.ready_tone_db)
        t0 = len(tone) + SAMPLE_RATE  # the talker starts
        r0 = t0 + 3 * SAMPLE_RATE  # our reply starts
        far = np.zeros(t0 + len(talker) + SAMPLE_RATE, np.float32)
        far[: len(tone)] = tone
        far[r0 : r0 + len(reply)] = reply
        sink = RingSink(SAMPLE_RATE, capacity=1 << 20)
        assert sink.write(far) == len(far)
        d = int(0.040 * SAMPLE_RATE)
        near = np.zeros(len(far), np.float32)
        near[d:] += 0.5 * far[:-d]
        near[t0 : t0 + len(talker)] += talker
        out, _ = _run_with_sink(near, sink, options)
        lag = DELAY + AEC3_LAG
        seg = slice(r0 + d, r0 + 3 * SAMPLE_RATE // 4)  # the reply's first 0.75 s, where jfk talks on under it
        under[tone_ms] = (float(np.corrcoef(out[seg.start + lag : seg.stop + lag], talker[seg.start - t0 : seg.stop - t0])[0, 1]),
                          _db(out[seg.start + lag : seg.stop + lag]) - _db(talker[seg.start - t0 : seg.stop - t0]))
    assert under[options.ready_tone_ms][0] > 0.9 and under[options.ready_tone_ms][1] > -3, under
    assert under[0][1] < -10, under  # without the tone it is lost (the test is not vacuous)


class _Recording:
    """An AudioProcessor that keeps every reference frame it was given."""

    def __init__(self, ap):
        self.ap, self.far = ap, []

    def process(self, near, far):
        self.far.append(np.array(far))
        return self.ap.process(near, far)


def test_aec3_hears_a_floor_where_nothing_of_ours_plays_and_everything_else_is_unchanged(speech_dir, monkeypatch):
    """Where nothing of ours plays, the reference AEC3 gets is a floor of noise at ``reference_floor_dbfs``, not exact
    zeros (on zeros, after it has heard its loudspeaker, AEC3 costs ~15x per frame: tools/frontend_cost.py); where we
    play it is what played. The echo gate, the converging hold and the passthrough read the far end as played, so
    they decide the same hop for hop, and the cleaned audio is the same to within the floor's effect."""
    import edge_rt.audio.frontend as frontend
    from edge_rt.audio.tone import ready_tone

    options = FrontEndOptions()
    assert options.reference_floor_dbfs == -100.0
    tone = ready_tone(SAMPLE_RATE, options.ready_tone_ms, options.ready_tone_db)
    talker = read_audio(speech_dir / "en_jfk.wav")[: 3 * SAMPLE_RATE]
    t0 = len(tone) + SAMPLE_RATE // 2
    far = np.zeros(t0 + len(talker) + SAMPLE_RATE // 2, np.float32)
    far[: len(tone)] = tone
    d = int(0.040 * SAMPLE_RATE)
    near = np.zeros(len(far), np.float32)
    near[d:] += 0.5 * far[:-d]
    near[t0 : t0 + len(talker)] += talker
    processors = []
    real = frontend._processor

    def recording(o):
        processors.append(_Recording(real(o)))
        return processors[-1]

    monkeypatch.setattr(frontend, "_processor", recording)
    runs = {}
    for passthrough in (options.passthrough_after_ms, None):
        for floor in (options.reference_floor_dbfs, None):
            sink = RingSink(SAMPLE_RATE, capacity=1 << 20)
            assert sink.write(far) == len(far)
            o = FrontEndOptions(reference_floor_dbfs=floor, passthrough_after_ms=passthrough)
            out, flags, _ = _frontend_run(near, sink, o)
            runs[floor, passthrough] = (out, flags, np.concatenate(processors[-1].far))
    lag = DELAY + AEC3_LAG
    for passthrough in (options.passthrough_after_ms, None):
        (out, flags, ref), (out0, flags0, ref0) = runs[-100.0, passthrough], runs[None, passthrough]
        for k in flags:  # the same decisions hop for hop
            np.testing.assert_array_equal(flags[k], flags0[k], err_msg=k)
        silent = slice(len(tone) + SAMPLE_RATE // 4, len(ref))  # long after the tone: nothing plays
        np.testing.assert_array_equal(ref0[silent], 0)
        assert abs(_db(ref[silent]) + 100) < 0.5, _db(ref[silent])
        playing = slice(0, len(tone))
        assert abs(_db(ref[playing] - ref0[playing]) + 100) < 0.5  # what played, plus the same floor
        talk = slice(t0 + lag, t0 + len(talker))
        assert float(np.corrcoef(out[talk], out0[talk])[0, 1]) > 0.999
    assert runs[-100.0, options.passthrough_after_ms][1]["passed"].any()  # the passthrough took part
    assert not runs[-100.0, None][1]["passed"].any()
