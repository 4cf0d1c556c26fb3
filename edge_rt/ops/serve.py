"""``edge-rt serve``: the always-on service around the real-time loop.

Loads the engines once, opens the audio devices, tells systemd READY=1, and
runs the loop; the loop's own iterations ping the watchdog (a stuck worker
stops pinging and systemd restarts the service). When the capture device
stops delivering audio, or cannot be opened, it says so in STATUS= and
retries with back-off instead of exiting; engines stay loaded. Each audio
(re)open is one recorded session when ``record.dir`` is set.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable

from edge_rt.config import Config
from edge_rt.loop.observer import LoopObserver
from edge_rt.ops.service import Notifier
from edge_rt.loop.trace import UtteranceTrace

if TYPE_CHECKING:
    from edge_rt.loop.options import LoopOptions

__all__ = ["ServiceObserver", "Server"]

RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)  # back-off between audio re-opens
# sysexits.h EX_TEMPFAIL: the audio backend is wedged (PortAudio hangs on a stream whose sound server died);
# only a fresh process can open audio again, so exit and let systemd restart us (Restart=on-failure).
EX_AUDIO_WEDGED = 75


class ServiceObserver(LoopObserver):
    """Watchdog pings and STATUS= from the worker thread; stops the loop when capture audio stalls."""

    def __init__(self, notifier: Notifier, stall_s: float, on_ready: Callable[[], None]):
        self.notifier = notifier
        self.stall_s = stall_s
        self._on_ready = on_ready
        self._loop = None
        self._last_written = -1
        self._last_progress = 0.0
        self.stalled = False
        self.utterances = 0

    def on_start(self, loop) -> None:
        self._loop = loop
        self._last_progress = time.monotonic()
        self._on_ready()

    def on_tick(self) -> None:
        now = time.monotonic()
        self.notifier.watchdog(now)
        written = self._loop.source.ring.written
        if written != self._last_written:
            self._last_written, self._last_progress = written, now
        elif now - self._last_progress > self.stall_s and not self.stalled:
            self.stalled = True  # the device vanished or its callback stopped: reopen it
            self._loop.stop()

    def on_caption(self, kind: str, utterance: int, lang: str, text: str) -> None:
        if kind == "final":
            self.notifier.status(f"translating utterance {utterance}")

    def on_utterance(self, trace: UtteranceTrace) -> None:
        self.utterances += 1
        lat = trace.turn_latency_ms
        last = f", last latency {lat:.0f} ms" if lat is not None else ""
        self.notifier.status(f"listening ({self.utterances} utterances{last})")


class Server:
    """One service process: :meth:`run` until :meth:`stop` (SIGTERM/SIGINT)."""

    def __init__(self, config: Config, notifier: Notifier, log: Callable[[str], None],
                 on_caption: Callable[[str, int, str, str], None] | None = None):
        self.config = config
        self.notifier = notifier
        self.log = log
        self.on_caption = on_caption or (lambda *a: None)
        self._stop = threading.Event()
        self._loop = None
        self._ready = False
        self._lost_at: float | None = None  # monotonic time the audio device was lost
        self._metrics = None
        self.sessions = 0

    def stop(self) -> None:
        """Safe from a signal handler: sets flags only."""
        self._stop.set()
        loop = self._loop
        if loop is not None:
            loop.stop()

    def _mark_ready(self) -> None:
        if self._lost_at is not None:  # the gap is logged: no audio was heard in it
            self.log(f"audio device back after {time.monotonic() - self._lost_at:.1f} s without audio")
            self._lost_at = None
        if not self._ready:
            self._ready = True
            self.notifier.ready("listening")
        else:
            self.notifier.status("listening (audio device back)")

    def _wait(self, seconds: float, why: str) -> None:
        """Back-off that keeps systemd informed (the main thread is alive, so it may ping)."""
        if self._lost_at is None:
            self._lost_at = time.monotonic()
        self.notifier.status(f"{why}; retrying in {seconds:.0f} s")
        self.log(f"{why}; retrying in {seconds:.0f} s")
        if not self._ready:
            self.notifier.extend_timeout(seconds + 30)
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            self.notifier.watchdog()
            self._stop.wait(0.2)

    def run(self) -> int:
        from edge_rt.audio.devices import AudioBackendWedged, AudioDeviceError, DeviceSink, DeviceSource, rescan
        from edge_rt.pipeline import StageOptions, load_stages
        from edge_rt.pack import BuiltPack

        c = self.config
        self.notifier.status(f"loading engines (pack {c.pack.name}, {c.pack.precision})")
        pack = BuiltPack.load(c.pack.name)
        stages = load_stages(pack, StageOptions(precision=c.pack.precision, threads=c.pack.threads,
                                                backend=c.engine.backend, target=c.translate.to))
        self.log(f"backend: {stages.backend.name} ({stages.backend.reason})")
        options = loop_options(c)
        if c.metrics.port:  # one registry for the whole service life, across audio reopenings
            from edge_rt.ops.metrics import Metrics

            self._metrics = Metrics()
            self._metrics.serve(c.metrics.port, c.metrics.bind)
        failures = 0
        while not self._stop.is_set():
            if failures:  # PortAudio lists devices once: a re-plugged headset needs a rescan
                try:
                    rescan(c.audio.backend)
                except AudioDeviceError as e:  # opening the device below reports what is missing
                    self.log(f"audio device rescan: {e}")
            try:
                source = DeviceSource(c.audio.device_in, rate=c.audio.rate_in or None, backend=c.audio.backend)
                sink = DeviceSink(c.audio.device_out, rate=c.audio.rate_out or None, backend=c.audio.backend)
            except AudioDeviceError as e:
                self._wait(RETRY_S[min(failures, len(RETRY_S) - 1)], f"audio device lost ({e})")
                failures += 1
                continue
            error, stalled = self._session(stages, options, source, sink)
            if self._stop.is_set():
                break
            if isinstance(error, AudioBackendWedged):
                self.log(f"audio device lost ({error}); exiting with {EX_AUDIO_WEDGED} for systemd to restart")
                self.notifier.stopping("audio backend wedged: restarting")
                return EX_AUDIO_WEDGED
            if stalled or isinstance(error, AudioDeviceError):
                why = "audio device lost (no capture audio)" if stalled else f"audio device lost ({error})"
                self._wait(RETRY_S[min(failures, len(RETRY_S) - 1)], why)
                failures += 1
                continue
            if error is not None:
                raise error  # a stage bug: exit non-zero, systemd restarts us (flight dump written)
            failures = 0
        self.notifier.stopping()
        return 0

    def _session(self, stages, options, source, sink) -> tuple[BaseException | None, bool]:
        from edge_rt.ops.flight import FlightOptions
        from edge_rt.loop.loop import Loop
        from edge_rt.ops.session import Recording, live_header, new_session_dir

        c = self.config
        observer = ServiceObserver(self.notifier, c.audio.stall_s, self._mark_ready)
        observers: list[LoopObserver] = [observer]
        if self._metrics is not None:
            observers.append(self._metrics)
        recording = None
        if c.record.dir:
            header = live_header(c.pack.name, c.pack.precision, c.pack.threads, options, source, sink,
                                 c.loop.latency_budget_ms)
            recording = Recording(new_session_dir(c.record.dir), header, sink, audio=c.record.audio,
                                  flight=FlightOptions(latency_budget_ms=c.loop.latency_budget_ms,
                                                       seconds=c.record.flight_s, max_dumps=c.record.max_dumps))
            sink = recording.sink
            observers += recording.observers
            self.log(f"recording to {recording.dir}")

        def caption(kind, n, lang, text):
            observer.on_caption(kind, n, lang, text)
            self.on_caption(kind, n, lang, text)

        loop = Loop(stages, source, sink, options, on_caption=caption, observers=observers)
        self._loop = loop
        if options.redecode is not None and loop.redecode_off:  # TensorRT's decoder: one sequence, no beam
            self.log(f"greedy decoding only ([loop] redecode_below is not used here): {loop.redecode_off}")
        if self._stop.is_set():
            loop.stop()
        self.log(f"listening on [{source.info.index}] {source.info.name} ({source.rate} Hz), speaking "
                 f"{options.target} on [{sink.info.index}] {sink.info.name} ({sink.rate} Hz)")
        error: list[BaseException] = []

        def work():
            try:
                loop.run()
            except BaseException as e:  # handed to the main thread, which decides: retry or exit
                error.append(e)
                sink.stop()  # run() does not stop a sink it started when the source failed to open

        worker = threading.Thread(target=work, name="edge-rt-loop")
        worker.start()
        while worker.is_alive():
            worker.join(0.2)  # the main thread stays free to take signals
        self._loop = None
        self.sessions += 1
        if recording is not None:
            from edge_rt.audio.devices import AudioDeviceError

            lost = observer.stalled or (error and isinstance(error[0], AudioDeviceError))
            recording.close(stopped_by="signal" if self._stop.is_set() else "audio" if lost else "error")
        return (error[0] if error else None), observer.stalled


def loop_options(c: Config) -> LoopOptions:
    """The service's LoopOptions from its config ([translate] and [loop]; 0 turns a [loop] feature off)."""
    from edge_rt.loop.context import ContextOptions
    from edge_rt.loop.endpoint import EndpointOptions
    from edge_rt.loop.loop import LoopOptions
    from edge_rt.loop.preroll import NoisyPrerollOptions, SoundStartOptions
    from edge_rt.loop.redecode import RedecodeOptions
    from edge_rt.loop.split import SplitOptions
    from edge_rt.loop.turn_policy import TurnOptions

    return LoopOptions(target=c.translate.to, source=c.translate.source,
                       endpoint=EndpointOptions(hangover_ms=c.loop.hangover_ms),
                       turn=TurnOptions(complete_after_ms=c.loop.complete_after_ms),
                       redecode=(RedecodeOptions(below_logprob=c.loop.redecode_below)
                                 if c.loop.redecode_below < 0 else None),
                       split=SplitOptions(below_tokens_per_s=c.loop.split_below) if c.loop.split_below > 0 else None,
                       noisy_preroll=(NoisyPrerollOptions(below_db=c.loop.noisy_preroll_below)
                                      if c.loop.noisy_preroll_below > 0 else None),
                       sound_start=(SoundStartOptions(above_db=c.loop.sound_start_above)
                                    if c.loop.sound_start_above > 0 else None),
                       repeat_words=c.loop.repeat_words or None,
                       context=ContextOptions(lend_within_s=c.loop.lend_within_s or None),
                       keep_traces=1000)  # always on: memory must not grow with every utterance
