"""The sounddevice backend without a sound card (its streams run in tests/loop/test_live_jack.py)."""

from __future__ import annotations

import pytest

from edge_rt.audio.devices import AudioDeviceError, rescan

sd = pytest.importorskip("sounddevice", reason="the sounddevice backend is optional (pip install 'edge-rt[audio]')")


def test_rescan_reinitialises_portaudio(monkeypatch):
    calls = []
    monkeypatch.setattr(sd, "_terminate", lambda: calls.append("terminate"))
    monkeypatch.setattr(sd, "_initialize", lambda: calls.append("initialize"))
    rescan("sounddevice")
    assert calls == ["terminate", "initialize"]


def test_a_failed_rescan_is_an_audio_device_error_not_swallowed(monkeypatch):
    def fail():
        raise sd.PortAudioError("Error initializing PortAudio")

    monkeypatch.setattr(sd, "_terminate", lambda: None)
    monkeypatch.setattr(sd, "_initialize", fail)
    with pytest.raises(AudioDeviceError, match="rescan audio devices failed.*Error initializing PortAudio"):
        rescan("sounddevice")
