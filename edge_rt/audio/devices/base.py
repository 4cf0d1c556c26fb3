"""What the audio backends share: device info, the stream protocol, and the rings between a callback and the worker.

A backend's audio callback only copies raw frames at the device rate: capture frames into a device-rate
ring (:meth:`CaptureRings.on_frames`), playback frames out of the sink's device-rate playback ring (the
loop writes speech into it already resampled to the device rate, on the worker). The capture side's
resampling to 16 kHz runs on the worker: :class:`ResamplingRing` is the 16 kHz capture ring as the loop
sees it, and it moves what the callback wrote through soxr whenever the worker asks how much there is or
reads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from edge_rt.audio.clock import CaptureClock
from edge_rt.audio.ring import Ring, RingStats
from edge_rt.audio.sources import CAPTURE_RING
from edge_rt.errors import EdgeRtError
from edge_rt.units import SAMPLE_RATE

__all__ = ["AudioBackendWedged", "AudioDeviceError", "Backend", "CaptureRings", "DeviceInfo", "InputCallback",
           "OutputCallback", "ResamplingRing", "Stream", "choose_device", "close_stream"]

# A stream whose device, driver or sound server died can hang in Pa_StopStream / Pa_CloseStream
# forever (PortAudio's JACK host API does when jackd dies); stopping gives up after this long.
STOP_TIMEOUT_S = 2.0
PULL_CHUNK = 4096  # device-rate samples the worker resamples per step (85 ms at 48 kHz)
RESAMPLER_SLACK = 256  # 16 kHz samples kept free in the capture ring beyond a chunk's nominal output


class AudioDeviceError(EdgeRtError):
    """An audio device is missing, busy or cannot run at the asked rate."""


class AudioBackendWedged(AudioDeviceError):
    """PortAudio hangs on a stream whose device vanished: only a new process can open audio again."""


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    hostapi: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate: float


# (mono float32 frames at the device rate, a view valid during the call; monotonic ns they were captured;
#  True when the backend flagged an overflow or another status)
InputCallback = Callable[[np.ndarray, int, bool], None]
# (float32 buffer to fill at the device rate; monotonic ns when its first sample is heard; status flagged)
OutputCallback = Callable[[np.ndarray, int, bool], None]


class Stream(Protocol):
    """An open, started device stream."""

    def stop(self) -> None: ...

    def close(self) -> None: ...


class Backend(Protocol):
    """What an audio backend module provides (see sounddevice.py, pyaudio.py)."""

    def list_devices(self) -> list[DeviceInfo]: ...

    def open_input(self, info: DeviceInfo, rate: int, block: int, callback: InputCallback) -> Stream:
        """Open and start a mono float32 capture stream; ``callback`` runs on the audio thread."""
        ...

    def open_output(self, info: DeviceInfo, rate: int, block: int, callback: OutputCallback) -> Stream:
        """Open and start a mono float32 playback stream; ``callback`` fills each buffer on the audio thread."""
        ...

    def rescan(self) -> None:
        """Make devices plugged in since start visible (no stream may be open); AudioDeviceError if it fails."""
        ...

    def abandon(self) -> None:
        """A stream is wedged: skip whatever teardown at process exit would hang or abort on it."""
        ...


def choose_device(devices: list[DeviceInfo], spec: str | int | None, kind: str) -> DeviceInfo:
    """The device matching an index or a case-insensitive name substring, with ``kind`` channels.

    ``spec`` None means the first device that has ``kind`` ("input"/"output") channels.
    """
    channels = (lambda d: d.max_input_channels) if kind == "input" else (lambda d: d.max_output_channels)
    usable = [d for d in devices if channels(d) > 0]
    listing = "; ".join(f"[{d.index}] {d.name}" for d in usable) or "none"
    if not usable:
        raise AudioDeviceError(f"no audio {kind} device found (is a sound card or JACK server present?)")
    if spec is None or spec == "":
        return usable[0]
    if isinstance(spec, int) or str(spec).isdigit():
        for d in usable:
            if d.index == int(spec):
                return d
        raise AudioDeviceError(f"no {kind} device with index {spec}; {kind} devices: {listing}")
    matches = [d for d in usable if str(spec).lower() in d.name.lower()]
    if not matches:
        raise AudioDeviceError(f"no {kind} device named like {spec!r}; {kind} devices: {listing} "
                               f"(`edge-rt devices` lists them)")
    return matches[0]


def close_stream(stream: Stream, what: str, abandon: Callable[[], None]) -> None:
    """Stop and close ``stream`` from a helper thread; a backend that does not return in time is wedged."""
    done = threading.Event()
    failure: list[Exception] = []

    def close():
        try:
            stream.stop()
            stream.close()
        except Exception as e:  # noqa: BLE001 - PortAudioError, OSError: reported below
            failure.append(e)
        finally:
            done.set()

    threading.Thread(target=close, name="audio-close", daemon=True).start()
    if not done.wait(STOP_TIMEOUT_S):
        abandon()
        raise AudioBackendWedged(f"{what}: the audio backend did not stop the stream within {STOP_TIMEOUT_S:.0f} s "
                                 f"(its device, driver or sound server died); a new process is needed to open "
                                 f"audio again (systemd restarts the service)")
    if failure:
        raise AudioDeviceError(f"{what}: stopping the stream failed ({failure[0]}); the device is probably gone"
                               ) from failure[0]


def raw_capacity(rate: int) -> int:
    """Device-rate ring size holding as many seconds as the 16 kHz capture ring (a power of two)."""
    return 1 << max(1, -(-CAPTURE_RING * rate // SAMPLE_RATE) - 1).bit_length()


class ResamplingRing:
    """The 16 kHz capture ring as the loop sees it (the consumer half of :class:`~edge_rt.audio.ring.Ring`),
    fed on the worker's side from a device-rate ring that the audio callback fills.

    :meth:`available`, :meth:`read_into` and :meth:`read` first pull what the callback wrote through soxr
    (nothing but a copy at 16 kHz) into a 16 kHz ring, so they must be called by the consumer (the loop's
    worker) only. Losses happen in the device-rate ring (the callback overwrites what the worker has not
    read): :attr:`stats` are that ring's, counted in device-rate samples; the 16 kHz timeline keeps its
    clock across a loss by inserting the lost span as silence.
    """

    def __init__(self, raw: Ring, raw_clock: CaptureClock, clock: CaptureClock, capacity: int = CAPTURE_RING):
        self.raw = raw
        self._raw_clock = raw_clock
        self._clock = clock
        self._out = Ring(capacity, policy="reject")  # the worker is its only producer: it writes what fits
        self._rate = raw_clock.rate
        self._resampler = None
        if self._rate != SAMPLE_RATE:
            import soxr

            self._resampler = soxr.ResampleStream(self._rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        self._scratch = np.empty(PULL_CHUNK, np.float32)
        self._next_raw = 0  # device-rate index the next pulled sample should have

    # -- the Ring views the loop, metrics and recorders read ----------------------
    @property
    def capacity(self) -> int:
        return self._out.capacity

    @property
    def written(self) -> int:
        """16 kHz samples pulled so far: the index of the next one (advances when the worker pulls)."""
        return self._out.written

    @property
    def read_index(self) -> int:
        return self._out.read_index

    @property
    def stats(self) -> RingStats:
        return self.raw.stats

    # -- consumer ---------------------------------------------------------------------
    def available(self) -> int:
        self.pull()
        return self._out.available()

    def read_into(self, out: np.ndarray, fill_silence: bool = False) -> tuple[int, int]:
        self.pull()
        return self._out.read_into(out, fill_silence)

    def read(self, n: int) -> tuple[int, np.ndarray]:
        self.pull()
        return self._out.read(n)

    def pull(self) -> None:
        """Resample what the callback has written so far into the 16 kHz ring, as far as it has room."""
        while self.raw.available():
            room = self._out.free() - RESAMPLER_SLACK
            want = min(len(self._scratch), room * self._rate // SAMPLE_RATE)
            if want <= 0:
                return  # the 16 kHz ring is full: the rest waits in the device-rate ring
            first, n = self.raw.read_into(self._scratch[:want])
            if n == 0:
                return
            if first > self._next_raw:
                self._silence(first - self._next_raw)
            self._next_raw = first + n
            frames = self._scratch[:n]
            samples = frames if self._resampler is None else self._resampler.resample_chunk(frames)
            index = self._out.written
            self._out.write(samples)
            if len(samples):  # soxr's output lags its input by delay() samples: the clock must not
                lag = 0 if self._resampler is None else round(self._resampler.delay())
                self._clock.anchor(index + len(samples) - 1 + lag, self._raw_clock.ns(first + n - 1))

    def _silence(self, lost: int) -> None:
        """The callback overwrote ``lost`` device-rate samples before the worker pulled them: keep the clock."""
        n = min(lost * SAMPLE_RATE // self._rate, max(0, self._out.free() - RESAMPLER_SLACK))
        if n:
            self._out.write(np.zeros(n, np.float32))  # rare (an overrun): allocating here is fine


class CaptureRings:
    """The capture wiring of one device stream: the callback's device-rate ring and the loop's 16 kHz view.

    :meth:`on_frames` is the input callback: it copies the frames into :attr:`raw` and anchors the
    device-rate clock, nothing else.
    """

    def __init__(self, rate: int):
        self.raw = Ring(raw_capacity(rate), policy="overwrite")
        self.raw_clock = CaptureClock(rate)
        self.clock = CaptureClock()
        self.ring = ResamplingRing(self.raw, self.raw_clock, self.clock)
        self.status_errors = 0  # callbacks that reported an overflow or another status

    def on_frames(self, frames: np.ndarray, t_ns: int, status: bool) -> None:
        if status:
            self.status_errors += 1
        index = self.raw.written
        self.raw.write(frames)
        if len(frames):
            self.raw_clock.anchor(index + len(frames) - 1, t_ns)
