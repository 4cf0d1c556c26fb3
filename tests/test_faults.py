"""Faults: a stage raising, the audio device vanishing and coming back, signals mid-utterance, a full disk.

Nothing here may take the translator down except what should: a stage failing on
every utterance, or a programming error at start-up.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edge_rt.audio.devices import AudioDeviceError
from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import PacedFileSink, TimelineSink
from edge_rt.audio.sources import FastFileSource, PacedFileSource
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.loop.observer import LoopObserver
from edge_rt.loop.stages import Stages
from edge_rt.pipeline import load_stages
from edge_rt.ops.session import Recording, Session, live_header
from edge_rt.units import SAMPLE_RATE
from edge_rt.audio.wav_stream import read_wav
from tests.jack import PERIOD, RATE, Harness, start_edge_rt

CLIPS = ("en_librispeech_1089-134691-0000", "en_librispeech_1089-134686-0001", "en_librispeech_1089-134691-0001")


@pytest.fixture(scope="module")
def stages(tiny_pack):
    return load_stages(tiny_pack)


@pytest.fixture(scope="module")
def three_utterances(speech_dir) -> np.ndarray:
    """Three short real clips with 1.5 s of silence between them."""
    gap = np.zeros(int(1.5 * SAMPLE_RATE), np.float32)
    parts = []
    for c in CLIPS:
        parts += [read_audio(speech_dir / f"{c}.wav"), gap]
    return np.concatenate(parts)


class Errors(LoopObserver):
    def __init__(self):
        self.seen: list[tuple[BaseException, object]] = []

    def on_error(self, exc, trace):
        self.seen.append((exc, trace))


class Failing:
    """Wraps a stage; its method ``name`` raises on the calls whose number is in ``on`` (0-based)."""

    def __init__(self, inner, name: str, on, exc=lambda: RuntimeError("injected fault")):
        self._inner, self._name, self._on, self._exc = inner, name, on, exc
        self.calls = 0

    def __getattr__(self, attr):
        value = getattr(self._inner, attr)
        if attr != self._name:
            return value

        def call(*a, **kw):
            n, self.calls = self.calls, self.calls + 1
            if self._on == "all" or n in self._on:
                raise self._exc()
            return value(*a, **kw)
        return call


def _loop(stages, audio, observers=(), **kw) -> Loop:
    source = FastFileSource(audio)
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / SAMPLE_RATE)
    opts = dict(target="pt", source="en", partials=False, speculate_after_ms=None)
    return Loop(stages, source, sink, LoopOptions(**{**opts, **kw}), observers=observers)


# -- a stage raises ----------------------------------------------------------------------
@pytest.mark.parametrize("stage,method", [("asr", "transcribe"), ("mt", "translate"), ("tts", "clauses")])
def test_a_stage_error_drops_that_utterance_and_the_loop_goes_on(stages, three_utterances, stage, method):
    broken = Stages(stages.vad, stages.asr, stages.mt, stages.tts)
    setattr(broken, stage, Failing(getattr(stages, stage), method, on={1}))  # the second utterance
    errors = Errors()
    loop = _loop(broken, three_utterances, observers=[errors])
    traces = loop.run()
    failed = [t for t in traces if t.dropped.startswith("stage error: RuntimeError: injected fault")]
    spoken = [t for t in traces if t.translation and not t.dropped]
    assert len(failed) == 1 and loop.stage_errors == 1, [(t.text, t.dropped) for t in traces]
    assert len(spoken) >= 2 and failed[0].start_sample > spoken[0].start_sample  # the ones after it still spoken
    assert any(t.start_sample > failed[0].start_sample for t in spoken)
    assert [(type(e), tr) for e, tr in errors.seen] == [(RuntimeError, failed[0])]


def test_a_stage_failing_on_every_utterance_goes_up_once_reported(stages, three_utterances):
    broken = Stages(stages.vad, Failing(stages.asr, "transcribe", on="all", exc=lambda: ZeroDivisionError("bug")),
                    stages.mt, stages.tts)
    errors = Errors()
    loop = _loop(broken, three_utterances, observers=[errors], max_consecutive_errors=2)
    with pytest.raises(ZeroDivisionError):
        loop.run()
    assert loop.stage_errors == 2 and len(errors.seen) == 2  # each failure reported once, none twice


def test_startup_errors_still_surface(stages, three_utterances):
    class BrokenSink(TimelineSink):
        def start(self):
            raise TypeError("a programming error in the sink")

    source = FastFileSource(three_utterances)
    loop = Loop(stages, source, BrokenSink(22050, now_s=lambda: 0.0), LoopOptions(target="pt"))
    with pytest.raises(TypeError, match="programming error"):
        loop.run()


@pytest.mark.parametrize("stage,method,what", [("asr", "transcribe", "decode"), ("tts", "clauses", "synthesis")])
def test_a_failing_speculation_is_counted_and_reported_and_the_end_does_the_work(stages, three_utterances, stage,
                                                                                 method, what):
    """Work ahead at a pause that raises is not dropped silently: it reaches Loop.errors and its counter."""
    broken = Stages(stages.vad, stages.asr, stages.mt, stages.tts)
    # partials off: the first call is the speculation at the first utterance's 64 ms pause
    setattr(broken, stage, Failing(getattr(stages, stage), method, on={0}))
    loop = _loop(broken, three_utterances, speculate_after_ms=64)
    traces = loop.run()
    assert loop.speculation_errors == 1 and loop.stage_errors == 0, list(loop.errors)
    assert [e for e in loop.errors if "speculative" in e] == [
        f"utterance 1 speculative {what}: RuntimeError: injected fault"], list(loop.errors)
    assert traces[0].translation and not traces[0].dropped  # its end decoded and spoke it after all


class _StandInDevices:
    """Stand-ins for DeviceSource/DeviceSink (`edge-rt run` without a sound card): the capture side hands out
    ``speech`` as fast as the worker takes it and then stays silent, like a device that never finishes."""

    def __init__(self, speech: np.ndarray):
        class Info:
            index, name, hostapi = 0, "stand-in", "none"

        class Source(FastFileSource):
            def __init__(self, *a, **kw):
                super().__init__(speech, tail_s=60.0)
                self.info, self.rate = Info, SAMPLE_RATE

            @property
            def finished(self):
                return False

        class Sink(PacedFileSink):
            def __init__(self, *a, **kw):
                super().__init__(SAMPLE_RATE, keep=False)
                self.info = Info

        self.Source, self.Sink = Source, Sink


def test_run_exits_non_zero_with_a_named_error_when_its_loop_fails(tiny_pack, three_utterances, monkeypatch,
                                                                   capsys):
    """`edge-rt run` whose ASR fails on every utterance: after 5 in a row the loop goes down, and so does run."""
    import edge_rt.audio.devices as devices
    import edge_rt.pipeline as pipeline
    from edge_rt.cli import main

    stand_in = _StandInDevices(np.concatenate([three_utterances, three_utterances]))  # 6 utterances
    monkeypatch.setattr(devices, "DeviceSource", stand_in.Source)
    monkeypatch.setattr(devices, "DeviceSink", stand_in.Sink)
    real_load = pipeline.load_stages

    def load_broken(*a, **kw):  # the test hook: the pack's real stages, the ASR made to fail every time
        s = real_load(*a, **kw)
        return Stages(s.vad, Failing(s.asr, "transcribe", on="all", exc=lambda: RuntimeError("injected fault")),
                      s.mt, s.tts, backend=s.backend)

    monkeypatch.setattr(pipeline, "load_stages", load_broken)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = main(["run", "--pack", "tiny", "--to", "pt", "--from", "en", "--device-in", "0", "--device-out", "0"])
    finally:
        for sig, handler in handlers.items():  # run installs its own: give pytest its Ctrl-C back
            signal.signal(sig, handler)
    err = capsys.readouterr().err
    assert code == 1, err
    assert "edge-rt: error: the translation loop stopped: RuntimeError: injected fault (5 utterances dropped" in err


# -- the capture device vanishes ------------------------------------------------------------
class VanishingSource(FastFileSource):
    """Delivers audio, then its stream raises (a USB headset pulled out) and stopping it raises too."""

    def __init__(self, audio, after: int):
        super().__init__(audio)
        self._after = after

    def pump(self):
        if self.ring.written >= self._after:
            raise AudioDeviceError("input device [3] USB headset: stream error (device unplugged)")
        super().pump()

    def stop(self):
        raise AudioDeviceError("cannot stop a stream whose device is gone")


class TrackingSink(TimelineSink):
    stopped = False

    def stop(self):
        self.stopped = True


def test_a_vanishing_capture_device_goes_up_as_a_device_error_and_the_sink_is_stopped(stages, three_utterances):
    source = VanishingSource(three_utterances, after=5 * SAMPLE_RATE)
    sink = TrackingSink(22050, now_s=lambda: 0.0)
    errors = Errors()
    loop = Loop(stages, source, sink, LoopOptions(target="pt", source="en"), observers=[errors])
    with pytest.raises(AudioDeviceError, match="unplugged"):
        loop.run()
    assert sink.stopped  # even though stopping the source raised
    assert [type(e) for e, _ in errors.seen] == [AudioDeviceError]
    assert any(t.translation for t in loop.traces)  # what was heard before the loss was translated


@pytest.fixture
def own_jack(monkeypatch):
    """A JACK dummy server of our own (name unique to this test), so killing it disturbs no one else."""
    if shutil.which("jackd") is None:
        if os.environ.get("CI"):
            pytest.fail("jackd is not installed; tools/system_deps.sh must install jackd2")
        pytest.skip("jackd is not installed (apt install jackd2 libportaudio2)")
    name = f"edgert-faults-{os.getpid()}"

    def start():
        proc = subprocess.Popen(["jackd", "-n", name, "--no-realtime", "-d", "dummy", "-r", str(RATE), "-p",
                                 str(PERIOD)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(50):
            if subprocess.run(["jack_lsp", "-s", name], capture_output=True).returncode == 0:
                return proc
            time.sleep(0.1)
        proc.kill()
        pytest.fail("jackd did not start")

    procs = [start()]
    yield name, procs, start
    for p in procs:
        if p.poll() is None:
            p.terminate()
            p.wait(5)


def _wait_for(lines: list[str], text: str, proc, timeout_s: float, count: int = 1) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(text in line for line in lines) < count:
        if proc.poll() is not None:
            raise AssertionError(f"edge-rt exited ({proc.returncode}) waiting for {text!r}: {''.join(lines)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} after {timeout_s} s: {''.join(lines)}")
        time.sleep(0.1)


def _serve(config: Path, env: dict) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "edge_rt", "serve", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    return proc, lines


def test_serve_exits_for_a_restart_when_the_sound_server_dies_and_comes_back_after_it(own_jack, tiny_pack,
                                                                                      tmp_path):
    """jackd killed under `edge-rt serve`: PortAudio's JACK host API hangs on the dead stream and cannot be
    re-initialised in-process (pa_jack.c asserts), so serve gives up on it within seconds, closes the session
    and exits 75; systemd (Restart=on-failure, played by this test) starts it again once the server is back."""
    name, procs, start_jack = own_jack
    config = tmp_path / "config.toml"
    config.write_text(f'[pack]\nname = "tiny"\n[audio]\ndevice_in = "0"\ndevice_out = "0"\nrate_in = {RATE}\n'
                      f'rate_out = {RATE}\nstall_s = 1.0\n[translate]\nto = "pt"\nfrom = "en"\n'
                      f'[record]\ndir = "{tmp_path / "sessions"}"\naudio = false\n')
    env = {**os.environ, "JACK_DEFAULT_SERVER": name}
    proc, lines = _serve(config, env)
    try:
        _wait_for(lines, "listening on", proc, 90)
        time.sleep(2.0)  # the streams are running (killing jackd while PortAudio opens them aborts in pa_jack.c)
        procs[0].kill()  # the sound server vanishes mid-stream
        procs[0].wait(5)
        proc.wait(30)
        assert proc.returncode == 75, "".join(lines)
        assert any("audio device lost" in line and "exiting with 75" in line for line in lines), "".join(lines)
        procs.append(start_jack())
        first_lines = lines
        proc, lines = _serve(config, env)  # what systemd does 5 s later
        _wait_for(lines, "listening on", proc, 90)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert proc.returncode == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    sessions = sorted((tmp_path / "sessions").glob("session-*/session.json"))
    assert [json.loads(p.read_text()).get("stopped_by") for p in sessions] == ["audio", "signal"], first_lines


class FlakyDevices:
    """Stand-ins for DeviceSource/DeviceSink: the first capture stream stops delivering after 2 s (a headset
    unplugged), the next two opens fail (not plugged back yet), then audio (speech) works again."""

    def __init__(self, speech: np.ndarray):
        self.opens = 0
        self.speech = speech
        devices = self

        class Info:
            index, name, hostapi = 7, "USB headset", "ALSA"

        class Source(PacedFileSource):
            def __init__(self, *a, **kw):
                devices.opens += 1
                if devices.opens in (2, 3):
                    raise AudioDeviceError("no input device named like 'USB'")
                first = devices.opens == 1
                # first: 2 s of room noise, then the stream stalls; after the reopen: speech
                super().__init__(np.zeros(2 * SAMPLE_RATE, np.float32) if first else devices.speech,
                                 tail_s=0 if first else 60.0)
                self.info, self.rate = Info, SAMPLE_RATE

            @property
            def finished(self):  # a device never finishes: it stalls
                return False

        class Sink(PacedFileSink):
            def __init__(self, *a, **kw):
                super().__init__(SAMPLE_RATE, keep=False)
                self.info = Info

        self.Source, self.Sink = Source, Sink


def test_serve_reopens_a_lost_device_with_back_off_and_logs_the_gap(tiny_pack, speech_dir, monkeypatch):
    import edge_rt.audio.devices as devices
    from edge_rt.config import Config
    from edge_rt.ops.serve import Server
    from edge_rt.ops.service import Notifier

    flaky = FlakyDevices(read_audio(speech_dir / "en_librispeech_1089-134691-0001.wav"))
    monkeypatch.setattr(devices, "DeviceSource", flaky.Source)
    monkeypatch.setattr(devices, "DeviceSink", flaky.Sink)
    config = Config().override(pack__name="tiny", translate__to="pt", translate__from="en", audio__stall_s=0.5)
    log: list[str] = []
    captions: list[tuple] = []
    server = Server(config, Notifier(None), log=log.append, on_caption=lambda *c: captions.append(c))
    worker = threading.Thread(target=server.run)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while not any(kind == "translation" for kind, *_ in captions) and time.monotonic() < deadline:
            assert worker.is_alive(), log
            time.sleep(0.1)
    finally:
        server.stop()
        worker.join(30)
    assert not worker.is_alive()
    lost = [line for line in log if "audio device lost" in line]
    assert len(lost) == 3 and "no capture audio" in lost[0] and "retrying in 1 s" in lost[0], log
    assert "retrying in 2 s" in lost[1] and "retrying in 5 s" in lost[2]  # back-off
    back = [line for line in log if "audio device back after" in line]
    assert len(back) == 1 and float(back[0].split("after ")[1].split(" s")[0]) >= 8.0, log  # 1 + 2 + 5 s of gap
    assert server.sessions == 2 and any(kind == "translation" for kind, *_ in captions)


# -- signals mid-utterance --------------------------------------------------------------------


def _periods_found(recorded: np.ndarray, clip: np.ndarray, n: int, reach: int = 4) -> tuple[int, list[tuple[int, int]]]:
    """How many of the clip's first ``n`` periods are in ``recorded`` bit for bit, in order, where each is
    expected right after the one before it or up to ``reach`` whole periods off (an xrun's skipped or
    repeated cycle); and each such shift as (period, offset in periods)."""
    found, offset, shifts = 0, 0, []
    for i in range(n):
        want = clip[i * PERIOD:(i + 1) * PERIOD]
        for d in (0, *(k for j in range(1, reach + 1) for k in (j, -j))):
            at = (i + offset + d) * PERIOD
            if at >= 0 and np.array_equal(recorded[at:at + PERIOD], want):
                if d:
                    offset += d
                    shifts.append((i, offset))
                found += 1
                break
    return found, shifts


def test_periods_found_follows_a_skipped_cycle():
    rng = np.random.default_rng(0)
    clip = np.round(rng.uniform(-1, 1, PERIOD * 50) * 32768)
    shifted = np.concatenate([clip[:PERIOD * 20], np.zeros(PERIOD), clip[PERIOD * 20:]])  # a period inserted
    assert _periods_found(shifted, clip, 50) == (50, [(20, 1)])
    dropped = np.concatenate([clip[:PERIOD * 20], clip[PERIOD * 21:]])
    assert _periods_found(dropped, clip, 50) == (49, [(21, -1)])
    garbled = clip.copy()
    garbled[PERIOD * 10:] += 1  # not the clip any more from period 10 on
    assert _periods_found(garbled, clip, 50)[0] == 10


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_utterance_stops_cleanly_with_the_recording_complete(jack, tiny_pack, speech_dir, tmp_path,
                                                                         signum):
    clip = read_audio(speech_dir / "en_jfk.wav")
    folder = tmp_path / "session"
    harness = Harness(clip)
    try:
        proc, lines = start_edge_rt(["run", "--pack", "tiny", "--to", "pt", "--from", "en", "--device-in", "0",
                                     "--device-out", "0", "--rate-in", str(RATE), "--rate-out", str(RATE),
                                     "--record", str(folder)], harness)
        harness.play()
        time.sleep(7.0)  # "... ask what you can do for your country": the VAD hears speech from 5.9 to 8.1 s
        played_s = (time.monotonic_ns() - harness.play_started_ns) / 1e9
        proc.send_signal(signum)
        proc.communicate(timeout=60)
        assert proc.returncode == 0, "".join(lines)
    finally:
        harness.close()
    s = Session.load(folder)
    assert s.header["ended_at"]
    audio, rate = read_wav(folder / "input.wav")
    # JACK's dummy loopback is bit exact: the clip is in the recording, sample for sample, up to the signal
    # (a period may be lost to an xrun when other processes starve this one: where the clock is kept only that
    # period differs; where a cycle is skipped the rest comes a whole period early or late, seen once in a
    # full run: `_periods_found` follows such a shift)
    # Where the clip starts in the recording: found by its first 10 periods, or (an xrun among those, seen once in
    # a full run here) by the next 10, and so on, counted back to the clip's first sample.
    recorded = np.round(audio * 32768)
    starts = []
    for offset in range(0, PERIOD * 50, PERIOD * 10):
        head = np.round(clip[offset : offset + PERIOD * 10] * 32768)
        starts = [i - offset for i in range(offset, len(recorded) - len(head)) if recorded[i] == head[0] and
                  np.array_equal(recorded[i : i + len(head)], head)]
        if starts:
            break
    assert starts, "the played clip is not in input.wav"
    kept = len(recorded) - starts[0]
    assert kept >= (played_s - 0.3) * RATE, (kept / RATE, played_s)
    n = min(kept, len(clip)) // PERIOD
    found, shifts = _periods_found(recorded[starts[0]:], np.round(clip * 32768), n)
    assert found >= 0.98 * n and len(shifts) <= 3, f"{n - found} of {n} periods missing; shifts {shifts}"
    assert s.traces, "the utterance cut by the signal was not finished"
    assert s.traces[-1]["end_reason"] == "flush" and "country" in s.traces[-1]["text"].lower(), s.traces


# -- the disk fills up while recording ---------------------------------------------------------
@pytest.fixture
def tiny_disk(tmp_path):
    """A 96 KiB tmpfs when we may mount one (root), else None (the fault is injected instead)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    ok = os.geteuid() == 0 and shutil.which("mount") and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)], capture_output=True).returncode == 0
    yield mount if ok else None
    if ok:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_stops_the_recording_with_a_logged_error_and_translation_goes_on(
        stages, three_utterances, tiny_disk, tmp_path, monkeypatch, caplog):
    if tiny_disk is None:  # not root: the writer's file refuses writes after ~3 s of audio
        import edge_rt.audio.wav_stream as ws

        real = ws.StreamingWav.append

        def append(self, samples):
            if self.frames > 3 * SAMPLE_RATE:
                raise OSError(errno.ENOSPC, "No space left on device")
            real(self, samples)
        monkeypatch.setattr(ws.StreamingWav, "append", append)
    folder = (tiny_disk or tmp_path) / "session"
    source = FastFileSource(three_utterances)
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / SAMPLE_RATE)
    options = LoopOptions(target="pt", source="en", partials=False)
    rec = Recording(folder, live_header("tiny", "fp32", 2, options, source, sink, 1500.0), sink)
    with caplog.at_level(logging.ERROR, logger="edge_rt.ops.session"):
        traces = Loop(stages, source, rec.sink, options, observers=rec.observers).run()
        rec.close(stopped_by="end")  # must not raise on the full disk
    assert sum(bool(t.translation) for t in traces) >= 3  # translation went on to the end
    err = rec.recorder.error
    assert isinstance(err, OSError) and err.errno == errno.ENOSPC
    assert any("recording to" in r.getMessage() and "stopped" in r.getMessage() for r in caplog.records)
    assert rec.recorder._q.qsize() < 50  # nothing piles up in memory once the writer stopped
    audio, _ = read_wav(folder / "input.wav")  # what was written before the disk filled is readable
    assert 0 < len(audio) < len(three_utterances)
