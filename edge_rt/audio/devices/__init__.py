"""Live audio devices: callbacks that only copy between the device and the rings.

Backends, one module each: ``sounddevice`` (default, sounddevice.py) and ``pyaudio`` (pyaudio.py); both
are optional (``pip install edge-rt[audio]``) and need PortAudio (``apt install libportaudio2``). A
device is chosen by index or by (part of) its name. Both directions run at the device rate in the
callback; the worker resamples: capture to 16 kHz when it reads (base.ResamplingRing), speech to the
device rate before it writes into the playback ring (the loop does, once per clause).
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from edge_rt.audio.devices.base import (AudioBackendWedged, AudioDeviceError, Backend, CaptureRings, DeviceInfo,
                                        choose_device, close_stream)
from edge_rt.audio.sinks import RingSink

__all__ = ["BACKENDS", "AudioBackendWedged", "AudioDeviceError", "DeviceInfo", "DeviceSink", "DeviceSource",
           "find_device", "get_backend", "list_devices", "rescan"]

BACKENDS = ("sounddevice", "pyaudio")
BLOCK = 320  # frames per device callback (20 ms at 16 kHz)


def get_backend(name: str) -> Backend:
    """The backend module called ``name`` (one of :data:`BACKENDS`)."""
    if name not in BACKENDS:
        raise AudioDeviceError(f"unknown audio backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return importlib.import_module(f"{__name__}.{name}")  # type: ignore[return-value]


def list_devices(backend: str = "sounddevice") -> list[DeviceInfo]:
    """Every audio device the backend sees."""
    return get_backend(backend).list_devices()


def find_device(spec: str | int | None, kind: str, backend: str = "sounddevice") -> DeviceInfo:
    """The device matching an index or a case-insensitive name substring, with ``kind`` channels.

    ``spec`` None means the first device that has ``kind`` ("input"/"output") channels.
    """
    return choose_device(list_devices(backend), spec, kind)


def rescan(backend: str = "sounddevice") -> None:
    """Make devices plugged in since start visible (call with no stream open); AudioDeviceError if it fails."""
    get_backend(backend).rescan()


class DeviceSource:
    """Microphone → device-rate ring (the callback copies) → 16 kHz capture ring (the worker resamples).

    ``ring`` and ``clock`` are what the loop reads: the 16 kHz view and its capture clock.
    """

    def __init__(self, device: str | int | None = None, rate: int | None = None, block: int = BLOCK,
                 backend: str = "sounddevice"):
        self._backend = get_backend(backend)
        self.info = find_device(device, "input", backend)
        self.rate = int(rate or self.info.default_samplerate)
        self._rings = CaptureRings(self.rate)
        self.ring = self._rings.ring
        self.clock = self._rings.clock
        self._block = block
        self._stream: Any = None

    @property
    def status_errors(self) -> int:
        """Callbacks that reported an overflow or another status."""
        return self._rings.status_errors

    def start(self) -> None:
        self._stream = self._backend.open_input(self.info, self.rate, self._block, self._rings.on_frames)

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            close_stream(stream, f"input device [{self.info.index}] {self.info.name}", self._backend.abandon)

    def pump(self) -> None:
        pass  # the callback produces; reading the ring resamples

    @property
    def finished(self) -> bool:
        return False


class DeviceSink(RingSink):
    """Playback ring (device rate) → speaker; the callback only copies (silence on underrun, counted)."""

    def __init__(self, device: str | int | None = None, rate: int | None = None, block: int = BLOCK,
                 backend: str = "sounddevice"):
        self._backend = get_backend(backend)
        self.info = find_device(device, "output", backend)
        super().__init__(int(rate or self.info.default_samplerate))
        self._block = block
        self._stream: Any = None
        self.status_errors = 0  # callbacks that reported an underflow or another status

    def _on_buffer(self, out: np.ndarray, t_ns: int, status: bool) -> None:
        if status:
            self.status_errors += 1
        self.consume(out, t_ns)

    def start(self) -> None:
        self._stream = self._backend.open_output(self.info, self.rate, self._block, self._on_buffer)

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            close_stream(stream, f"output device [{self.info.index}] {self.info.name}", self._backend.abandon)
