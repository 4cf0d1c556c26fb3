"""The ``sounddevice`` backend (default): PortAudio through python-sounddevice.

Optional: ``pip install 'edge-rt[audio]'`` and ``apt install libportaudio2``. Each callback only hands
the device's frames (or the buffer to fill) to the ring wiring in base.py.
"""

from __future__ import annotations

import atexit
import time

from edge_rt.audio.devices.base import AudioDeviceError, DeviceInfo, InputCallback, OutputCallback, Stream

__all__ = ["abandon", "list_devices", "open_input", "open_output", "rescan"]


def _sd():
    try:
        import sounddevice as sd
    except (ImportError, OSError) as e:
        raise AudioDeviceError(
            f"live audio needs sounddevice and PortAudio ({e}); install them with "
            f"`pip install 'edge-rt[audio]'` and `apt install libportaudio2`"
        ) from e
    return sd


def list_devices() -> list[DeviceInfo]:
    """Every audio device PortAudio sees."""
    sd = _sd()
    try:
        apis = sd.query_hostapis()
        devices = sd.query_devices()
    except sd.PortAudioError as e:
        raise AudioDeviceError(f"PortAudio cannot list audio devices ({e}); is a sound card or JACK server "
                               f"present, and is libportaudio2 installed?") from e
    return [
        DeviceInfo(i, d["name"], apis[d["hostapi"]]["name"], d["max_input_channels"], d["max_output_channels"],
                   float(d["default_samplerate"]))
        for i, d in enumerate(devices)
    ]


def open_input(info: DeviceInfo, rate: int, block: int, callback: InputCallback) -> Stream:
    sd = _sd()

    def on_audio(indata, frames, time_info, status):
        callback(indata[:, 0], time.monotonic_ns(), bool(status))

    return _start(sd.InputStream, on_audio, "input", info, rate, block)


def open_output(info: DeviceInfo, rate: int, block: int, callback: OutputCallback) -> Stream:
    sd = _sd()
    latency_ns = [0]  # known once the stream exists; the first callbacks may run before

    def on_audio(outdata, frames, time_info, status):
        callback(outdata[:, 0], time.monotonic_ns() + latency_ns[0], bool(status))

    stream = _start(sd.OutputStream, on_audio, "output", info, rate, block, latency_ns)
    return stream


def _start(kind_cls, on_audio, kind: str, info: DeviceInfo, rate: int, block: int, latency_ns=None) -> Stream:
    try:
        stream = kind_cls(device=info.index, samplerate=rate, channels=1, dtype="float32", blocksize=block,
                          callback=on_audio)
        if latency_ns is not None:
            latency_ns[0] = int(stream.latency * 1e9)
        stream.start()
    except Exception as e:  # noqa: BLE001 - PortAudioError, ValueError for an unsupported rate
        raise AudioDeviceError(f"cannot open {kind} device [{info.index}] {info.name} at {rate} Hz: {e}") from e
    return stream


def rescan() -> None:
    """Re-initialise PortAudio so it lists devices plugged in since it started (no stream may be open).

    PortAudio reads the device list once, in Pa_Initialize, and sounddevice 0.5 has no public call to
    refresh it; its maintainer's advice is these two functions, which wrap Pa_Terminate/Pa_Initialize:
    https://github.com/spatialaudio/python-sounddevice/issues/125
    """
    sd = _sd()
    try:
        sd._terminate()
        sd._initialize()
    except (sd.PortAudioError, AttributeError) as e:  # AttributeError: a sounddevice that renamed them
        raise AudioDeviceError(f"re-initialising PortAudio to rescan audio devices failed ({e}); a device "
                               f"plugged in since start may not be found (restarting the process finds it)") from e


def abandon() -> None:
    """sounddevice terminates PortAudio at exit, which aborts the process (pa_jack.c asserts) or hangs with a
    wedged stream: leave it to the operating system."""
    try:
        import sounddevice as sd

        atexit.unregister(sd._exit_handler)
    except (ImportError, OSError, AttributeError):
        pass
