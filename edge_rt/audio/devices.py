"""Live audio devices: callbacks that only copy between the device and the rings.

Backends: ``sounddevice`` (default) and ``pyaudio``; both are optional
(``pip install edge-rt[audio]``) and need PortAudio (``apt install libportaudio2``).
A device is chosen by index or by (part of) its name. The capture side
resamples the device rate to 16 kHz, the playback side plays at the device
rate (the loop resamples speech to it once per clause).
"""

from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_rt.audio.clock import CaptureClock
from edge_rt.audio.ring import Ring
from edge_rt.audio.sinks import RingSink
from edge_rt.audio.sources import CAPTURE_RING
from edge_rt.errors import EdgeRtError
from edge_rt.units import SAMPLE_RATE

BACKENDS = ("sounddevice", "pyaudio")
# A stream whose device, driver or sound server died can hang in Pa_StopStream / Pa_CloseStream
# forever (PortAudio's JACK host API does when jackd dies); stopping gives up after this long.
STOP_TIMEOUT_S = 2.0


class AudioDeviceError(EdgeRtError):
    """An audio device is missing, busy or cannot run at the asked rate."""


class AudioBackendWedged(AudioDeviceError):
    """PortAudio hangs on a stream whose device vanished: only a new process can open audio again."""


def _close_stream(stream, what: str) -> None:
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
        _skip_portaudio_exit_handler()
        raise AudioBackendWedged(f"{what}: the audio backend did not stop the stream within {STOP_TIMEOUT_S:.0f} s "
                                 f"(its device, driver or sound server died); a new process is needed to open "
                                 f"audio again (systemd restarts the service)")
    if failure:
        raise AudioDeviceError(f"{what}: stopping the stream failed ({failure[0]}); the device is probably gone"
                               ) from failure[0]


def _skip_portaudio_exit_handler() -> None:
    """sounddevice terminates PortAudio at exit, which aborts the process (pa_jack.c asserts) or hangs with a
    wedged stream: leave it to the operating system."""
    try:
        import sounddevice as sd

        atexit.unregister(sd._exit_handler)
    except (ImportError, OSError, AttributeError):
        pass


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    hostapi: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate: float


def _sounddevice():
    try:
        import sounddevice as sd
    except (ImportError, OSError) as e:
        raise AudioDeviceError(
            f"live audio needs sounddevice and PortAudio ({e}); install them with "
            f"`pip install 'edge-rt[audio]'` and `apt install libportaudio2`"
        ) from e
    return sd


def list_devices(backend: str = "sounddevice") -> list[DeviceInfo]:
    """Every audio device PortAudio sees."""
    if backend == "pyaudio":
        return _pyaudio_list()
    sd = _sounddevice()
    apis = sd.query_hostapis()
    return [
        DeviceInfo(i, d["name"], apis[d["hostapi"]]["name"], d["max_input_channels"], d["max_output_channels"],
                   float(d["default_samplerate"]))
        for i, d in enumerate(sd.query_devices())
    ]


def find_device(spec: str | int | None, kind: str, backend: str = "sounddevice") -> DeviceInfo:
    """The device matching an index or a case-insensitive name substring, with ``kind`` channels.

    ``spec`` None means the first device that has ``kind`` ("input"/"output") channels.
    """
    devices = list_devices(backend)
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


class DeviceSource:
    """Microphone → capture ring (16 kHz). The callback only resamples (if needed) and copies."""

    def __init__(self, device: str | int | None = None, rate: int | None = None, block: int = 320,
                 backend: str = "sounddevice"):
        if backend not in BACKENDS:
            raise AudioDeviceError(f"unknown audio backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.info = find_device(device, "input", backend)
        self.rate = int(rate or self.info.default_samplerate)
        self.ring = Ring(CAPTURE_RING, policy="overwrite")
        self.clock = CaptureClock()
        self._block = block
        self._backend = backend
        self._stream: Any = None
        self._resampler = None
        if self.rate != SAMPLE_RATE:
            import soxr

            self._resampler = soxr.ResampleStream(self.rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        self.status_errors = 0  # callbacks that reported an overflow or other status

    def _on_block(self, mono: np.ndarray) -> None:
        t_ns = time.monotonic_ns()
        if self._resampler is not None:
            mono = self._resampler.resample_chunk(mono)
        index = self.ring.written
        self.ring.write(mono)
        if len(mono):
            self.clock.anchor(index + len(mono) - 1, t_ns)

    def start(self) -> None:
        if self._backend == "pyaudio":
            self._stream = _pyaudio_stream(self, "input")
            return
        sd = _sounddevice()

        def callback(indata, frames, time_info, status):
            if status:
                self.status_errors += 1
            self._on_block(indata[:, 0])

        try:
            self._stream = sd.InputStream(device=self.info.index, samplerate=self.rate, channels=1,
                                          dtype="float32", blocksize=self._block, callback=callback)
            self._stream.start()
        except Exception as e:  # PortAudioError, ValueError for an unsupported rate
            raise AudioDeviceError(f"cannot open input device [{self.info.index}] {self.info.name} at "
                                   f"{self.rate} Hz: {e}") from e

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            _close_stream(stream, f"input device [{self.info.index}] {self.info.name}")

    def pump(self) -> None:
        pass

    @property
    def finished(self) -> bool:
        return False


class DeviceSink(RingSink):
    """Playback ring → speaker; the callback only copies (silence on underrun, counted)."""

    def __init__(self, device: str | int | None = None, rate: int | None = None, block: int = 320,
                 backend: str = "sounddevice"):
        if backend not in BACKENDS:
            raise AudioDeviceError(f"unknown audio backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.info = find_device(device, "output", backend)
        super().__init__(int(rate or self.info.default_samplerate))
        self._block = block
        self._backend = backend
        self._stream: Any = None
        self.status_errors = 0

    def start(self) -> None:
        if self._backend == "pyaudio":
            self._stream = _pyaudio_stream(self, "output")
            return
        sd = _sounddevice()

        def callback(outdata, frames, time_info, status):
            if status:
                self.status_errors += 1
            latency_ns = int(self._stream.latency * 1e9) if self._stream is not None else 0
            self.consume(outdata[:, 0], time.monotonic_ns() + latency_ns)

        try:
            self._stream = sd.OutputStream(device=self.info.index, samplerate=self.rate, channels=1,
                                           dtype="float32", blocksize=self._block, callback=callback)
            self._stream.start()
        except Exception as e:
            raise AudioDeviceError(f"cannot open output device [{self.info.index}] {self.info.name} at "
                                   f"{self.rate} Hz: {e}") from e

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            _close_stream(stream, f"output device [{self.info.index}] {self.info.name}")


# -- pyaudio backend -----------------------------------------------------------
def _pyaudio():
    try:
        import pyaudio
    except ImportError as e:
        raise AudioDeviceError(
            f"the pyaudio backend needs PyAudio ({e}): `apt install portaudio19-dev && pip install pyaudio`, "
            f"or use the default backend (sounddevice)"
        ) from e
    return pyaudio


def _pyaudio_list() -> list[DeviceInfo]:
    pyaudio = _pyaudio()
    pa = pyaudio.PyAudio()
    try:
        out = []
        for i in range(pa.get_device_count()):
            d = pa.get_device_info_by_index(i)
            api = pa.get_host_api_info_by_index(d["hostApi"])["name"]
            out.append(DeviceInfo(i, d["name"], api, int(d["maxInputChannels"]), int(d["maxOutputChannels"]),
                                  float(d["defaultSampleRate"])))
        return out
    finally:
        pa.terminate()


class _PyAudioStream:
    def __init__(self, pa, stream):
        self._pa, self._stream = pa, stream

    def stop(self) -> None:
        self._stream.stop_stream()

    def close(self) -> None:
        self._stream.close()
        self._pa.terminate()


def _pyaudio_stream(owner, kind: str) -> _PyAudioStream:
    pyaudio = _pyaudio()
    pa = pyaudio.PyAudio()
    if kind == "input":
        def callback(in_data, frame_count, time_info, status):
            owner._on_block(np.frombuffer(in_data, dtype=np.float32))
            return None, pyaudio.paContinue
        kwargs = dict(input=True, input_device_index=owner.info.index)
    else:
        buf = np.zeros(owner._block, np.float32)

        def callback(in_data, frame_count, time_info, status):
            out = buf if frame_count == len(buf) else np.zeros(frame_count, np.float32)
            owner.consume(out, time.monotonic_ns())
            return out.tobytes(), pyaudio.paContinue
        kwargs = dict(output=True, output_device_index=owner.info.index)
    try:
        stream = pa.open(format=pyaudio.paFloat32, channels=1, rate=owner.rate, frames_per_buffer=owner._block,
                         stream_callback=callback, **kwargs)
    except Exception as e:
        pa.terminate()
        raise AudioDeviceError(f"cannot open {kind} device [{owner.info.index}] {owner.info.name} with pyaudio "
                               f"at {owner.rate} Hz: {e}") from e
    stream.start_stream()
    return _PyAudioStream(pa, stream)
