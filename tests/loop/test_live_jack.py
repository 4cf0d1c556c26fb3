"""Live audio through a JACK dummy server: `edge-rt run` hears a real clip and speaks its translation.

The harness (this process) plays en_jfk into edge-rt's capture port at real
time and records edge-rt's playback port; then the recording is transcribed
back with the pack's ASR and must hold the words of the translation.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.backends.factory import OrtEngines
from tests.jack import RATE, run_live




def _words(text: str) -> set[str]:
    return {w.strip(".,!?;:").lower() for w in text.split() if len(w.strip(".,!?;:")) > 2}


@pytest.mark.parametrize("backend", ["sounddevice", "pyaudio"])
def test_live_run_translates_speech_into_the_headset(jack, default_pack, speech_dir, tmp_path, backend):
    trace_path = tmp_path / "trace.jsonl"
    recorded = run_live(read_audio(speech_dir / "en_jfk.wav"),  # 6 s after: hangover, decode, translate, speak
                        ["--to", "pt", "--from", "en", "--trace", str(trace_path), "--audio-backend", backend], 6.0)
    traces = [json.loads(line) for line in trace_path.read_text().splitlines()]
    spoken = [t for t in traces if t["translation"]]
    assert spoken, f"no utterance translated: {traces}"
    for t in spoken:
        for event in ("speech_start", "speech_end", "end_detected", "asr_final", "mt_done", "tts_first_chunk",
                      "first_output"):
            assert event in t["t_ns"], (event, t)
        assert 0 < t["turn_latency_ms"] < 10_000
    assert np.sqrt(np.mean(recorded**2)) > 0.005, "nothing was played"
    from edge_rt.stages.asr.whisper import Asr

    heard = Asr.from_pack(default_pack, engines=OrtEngines(default_pack)).transcribe(recorded, language="pt").text
    expected = _words(" ".join(t["translation"] for t in spoken))
    got = _words(heard)
    assert len(expected & got) >= 0.4 * len(expected), (heard, expected)


def test_live_run_streams_piper_speech_at_the_device_rate(jack, default_pack, speech_dir, tmp_path):
    """German into English: Piper's sentences stream in vocoder windows (stages/tts/vocoder.py) at 22050 Hz,
    resampled to the JACK server's rate through one soxr stream per clause, with no gap between windows;
    Whisper hears the translation back."""
    trace_path = tmp_path / "trace.jsonl"
    recorded = run_live(read_audio(speech_dir / "de_fleurs_test_004.wav"),  # 8 s: the hold, decode, translate, speak
                        ["--to", "en", "--from", "de", "--trace", str(trace_path)], 8.0)
    traces = [json.loads(line) for line in trace_path.read_text().splitlines()]
    spoken = [t for t in traces if t["translation"] and "first_output" in t["t_ns"]]
    assert spoken, f"no utterance translated: {traces}"
    from edge_rt.stages.asr.whisper import Asr

    heard = Asr.from_pack(default_pack, engines=OrtEngines(default_pack)).transcribe(recorded, language="en").text
    expected = _words(" ".join(t["translation"] for t in spoken))
    got = _words(heard)
    assert len(expected & got) >= 0.6 * len(expected), (heard, expected)
    # No dropout: the sink plays exact zeros when it runs dry, so a gap inside speech is a run of zeros
    # right after loud audio (with speech_lead_s=0 this run had two, 0.48 and 0.22 s, where the first
    # 0.37-s window ran out while the worker decoded the source caption; with the default, none).
    assert _dropouts(recorded) == [], "the streamed speech stopped mid-sound (start s, length s, RMS before)"


def _dropouts(x: np.ndarray, min_ms: float = 5, edge_ms: float = 2, level: float = 0.01) -> list:
    """(start s, length s, RMS of the edge_ms before) of every run of exact zeros of at least min_ms that
    cuts off audio louder than ``level``: an underrun inside speech, not the silence after it."""
    d = np.diff(np.concatenate([[0], (x == 0).astype(np.int8), [0]]))
    edge = int(edge_ms * RATE / 1000)
    out = []
    for a, b in zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)):
        if b - a >= min_ms * RATE / 1000 and a >= edge and b < len(x):
            before = float(np.sqrt(np.mean(x[a - edge:a] ** 2)))
            if before > level:
                out.append((round(a / RATE, 3), round((b - a) / RATE, 3), round(before, 3)))
    return out
