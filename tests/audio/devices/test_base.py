"""The ring wiring shared by the audio backends: callbacks only copy, the worker resamples when it reads."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import soxr

from edge_rt.audio.devices import base
from edge_rt.audio.devices.base import (AudioBackendWedged, AudioDeviceError, CaptureRings, DeviceInfo,
                                        ResamplingRing, choose_device, close_stream)
from edge_rt.audio.clock import CaptureClock
from edge_rt.audio.ring import Ring
from edge_rt.units import SAMPLE_RATE

PERIOD = 480  # device frames per callback (10 ms at 48 kHz)


def _tone(rate: int, seconds: float, hz: float = 1000.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _feed(rings: CaptureRings, audio: np.ndarray, rate: int, t0_ns: int = 10**12) -> None:
    """What a device callback does, period by period: hand its frames over with their capture time."""
    for k in range(0, len(audio), PERIOD):
        frames = audio[k : k + PERIOD]
        rings.on_frames(frames, t0_ns + (k + len(frames) - 1) * 10**9 // rate, False)


def _read_all(ring) -> tuple[int, np.ndarray]:
    hop = np.empty(512, np.float32)
    out, first_index = [], None
    while ring.available() >= len(hop):
        first, n = ring.read_into(hop)
        first_index = first if first_index is None else first_index
        out.append(hop[:n].copy())
    return first_index, np.concatenate(out)


def test_the_callback_only_copies_into_the_device_rate_ring():
    rings = CaptureRings(48_000)
    _feed(rings, _tone(48_000, 0.5), 48_000)
    assert rings.raw.written == 24_000  # every device frame is in the device-rate ring ...
    assert rings.ring.written == 0  # ... and nothing was resampled until the worker reads


def test_the_worker_side_resamples_48k_to_16k_like_soxr_in_one_pass():
    rate = 48_000
    audio = _tone(rate, 2.0)
    rings = CaptureRings(rate)
    _feed(rings, audio, rate)
    first, got = _read_all(rings.ring)
    assert first == 0
    want = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ")
    n = len(got)
    assert abs(n - len(want)) <= 512 + 64  # the last partial hop stays in the ring (and soxr's delay)
    np.testing.assert_allclose(got[: n - 64], want[: n - 64], atol=1e-5)
    spectrum = np.abs(np.fft.rfft(got[SAMPLE_RATE // 2 :]))
    assert np.argmax(spectrum) * SAMPLE_RATE / len(got[SAMPLE_RATE // 2 :]) == pytest.approx(1000.0, abs=2.0)


def test_at_16k_the_worker_copies_bit_exact():
    audio = np.random.default_rng(0).uniform(-1, 1, 16_000).astype(np.float32)
    rings = CaptureRings(SAMPLE_RATE)
    _feed(rings, audio, SAMPLE_RATE)
    first, got = _read_all(rings.ring)
    assert first == 0 and np.array_equal(got, audio[: len(got)]) and len(got) == 16_000 // 512 * 512


def test_the_16k_clock_follows_the_device_clock():
    rate, t0 = 48_000, 5 * 10**12
    rings = CaptureRings(rate)
    _feed(rings, _tone(rate, 1.0), rate, t0_ns=t0)
    rings.ring.available()  # the worker pulls
    # 16 kHz sample i was captured i / 16000 s after the first device frame (soxr's delay accounted for)
    for i in (0, 8_000, rings.ring.written - 1):
        assert abs(rings.clock.ns(i) - (t0 + i * 10**9 // SAMPLE_RATE)) < 200_000, i


def test_available_is_what_a_read_returns():
    rings = CaptureRings(44_100)
    _feed(rings, _tone(44_100, 0.3), 44_100)
    n = rings.ring.available()
    first, got = rings.ring.read(n + 1000)
    assert len(got) == n and first == 0


def test_an_overrun_on_the_device_side_is_counted_and_the_16k_clock_keeps_its_place():
    rate = 48_000
    raw = Ring(1 << 14, policy="overwrite")
    ring = ResamplingRing(raw, CaptureClock(rate), CaptureClock())
    rings_audio = _tone(rate, 1.0)
    raw.write(rings_audio[:8_000])
    ring.available()  # the worker pulls 8000 frames
    raw.write(rings_audio[8_000:])  # 40000 frames while the worker was busy: more than the ring holds
    ring.available()
    assert ring.stats.overruns == 1 and ring.stats.dropped == 40_000 - (1 << 14)
    # the lost span became silence, so 16 kHz indices still match device time: as many as without a loss
    whole = ResamplingRing(Ring(1 << 16, policy="overwrite"), CaptureClock(rate), CaptureClock())
    whole.raw.write(rings_audio)
    whole.available()
    # (within 4 ms: soxr's delay depends on how its input is chunked)
    assert abs(ring.written - whole.written) <= 64, (ring.written, whole.written)


def test_choose_device_by_index_name_or_first():
    devices = [DeviceInfo(0, "system", "JACK", 2, 0, 48000.0), DeviceInfo(1, "USB Headset", "ALSA", 1, 2, 48000.0)]
    assert choose_device(devices, None, "output").index == 1
    assert choose_device(devices, "usb", "input").index == 1
    assert choose_device(devices, 0, "input").name == "system"
    with pytest.raises(AudioDeviceError, match=r"no output device named like 'system'.*\[1\] USB Headset"):
        choose_device(devices, "system", "output")
    with pytest.raises(AudioDeviceError, match="no audio input device found"):
        choose_device([], None, "input")


def test_a_stream_that_hangs_on_stop_is_reported_wedged(monkeypatch):
    monkeypatch.setattr(base, "STOP_TIMEOUT_S", 0.2)
    release = threading.Event()
    abandoned = []

    class Hangs:
        def stop(self):
            release.wait(5)

        def close(self):
            pass

    try:
        with pytest.raises(AudioBackendWedged, match="new process"):
            close_stream(Hangs(), "input device [0] system", lambda: abandoned.append(True))
    finally:
        release.set()
    assert abandoned == [True]


def test_a_stream_that_fails_to_stop_says_the_device_is_gone():
    class Fails:
        def stop(self):
            raise OSError("device unavailable")

        def close(self):
            pass

    with pytest.raises(AudioDeviceError, match="device is probably gone"):
        close_stream(Fails(), "output device [1] USB", lambda: None)
