"""The ``pyaudio`` backend: PortAudio through PyAudio.

Optional: ``apt install portaudio19-dev && pip install pyaudio``. Each :class:`pyaudio.PyAudio` instance
initialises PortAudio itself, so a listing or a stream opened after a device was plugged in sees it.
"""

from __future__ import annotations

import time

import numpy as np

from edge_rt.audio.devices.base import AudioDeviceError, DeviceInfo, InputCallback, OutputCallback, Stream

__all__ = ["abandon", "list_devices", "open_input", "open_output", "rescan"]


def _pyaudio():
    try:
        import pyaudio
    except ImportError as e:
        raise AudioDeviceError(
            f"the pyaudio backend needs PyAudio ({e}): `apt install portaudio19-dev && pip install pyaudio`, "
            f"or use the default backend (sounddevice)"
        ) from e
    return pyaudio


def list_devices() -> list[DeviceInfo]:
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
    """A started PyAudio stream and the PyAudio instance that owns it (terminated with it)."""

    def __init__(self, pa, stream):
        self._pa, self._stream = pa, stream

    def stop(self) -> None:
        self._stream.stop_stream()

    def close(self) -> None:
        self._stream.close()
        self._pa.terminate()


def open_input(info: DeviceInfo, rate: int, block: int, callback: InputCallback) -> Stream:
    pyaudio = _pyaudio()

    def on_audio(in_data, frame_count, time_info, status):
        callback(np.frombuffer(in_data, dtype=np.float32), time.monotonic_ns(), bool(status))
        return None, pyaudio.paContinue

    return _start(pyaudio, on_audio, "input", info, rate, block)


def open_output(info: DeviceInfo, rate: int, block: int, callback: OutputCallback) -> Stream:
    pyaudio = _pyaudio()
    buf = np.zeros(block, np.float32)
    latency_ns = [0]

    def on_audio(in_data, frame_count, time_info, status):
        out = buf if frame_count == len(buf) else np.zeros(frame_count, np.float32)
        callback(out, time.monotonic_ns() + latency_ns[0], bool(status))
        return out.tobytes(), pyaudio.paContinue  # PyAudio takes bytes: this copy is its interface

    return _start(pyaudio, on_audio, "output", info, rate, block, latency_ns)


def _start(pyaudio, on_audio, kind: str, info: DeviceInfo, rate: int, block: int, latency_ns=None) -> Stream:
    pa = pyaudio.PyAudio()
    device = {"input": True, "input_device_index": info.index} if kind == "input" else {
        "output": True, "output_device_index": info.index}
    try:
        stream = pa.open(format=pyaudio.paFloat32, channels=1, rate=rate, frames_per_buffer=block,
                         stream_callback=on_audio, start=False, **device)
        if latency_ns is not None:
            latency_ns[0] = int(stream.get_output_latency() * 1e9)
        stream.start_stream()
    except Exception as e:  # noqa: BLE001 - OSError (PortAudio's error codes), ValueError
        pa.terminate()
        raise AudioDeviceError(f"cannot open {kind} device [{info.index}] {info.name} with pyaudio "
                               f"at {rate} Hz: {e}") from e
    return _PyAudioStream(pa, stream)


def rescan() -> None:
    """Nothing to do: every list and open starts a PyAudio instance, which initialises PortAudio afresh."""


def abandon() -> None:
    """PyAudio registers no exit-time teardown: nothing hangs at exit on a wedged stream."""
