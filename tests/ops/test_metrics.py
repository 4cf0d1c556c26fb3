"""Prometheus metrics from a real loop run (file source, real models)."""

from __future__ import annotations

import socket
import urllib.request

import numpy as np

from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import TimelineSink
from edge_rt.audio.sources import FastFileSource
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.pipeline import load_stages
from edge_rt.ops.metrics import Metrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_count_utterances_and_latency_and_serve_on_loopback(tiny_pack, speech_dir):
    stages = load_stages(tiny_pack)
    audio = read_audio(speech_dir / "en_jfk.wav")
    source = FastFileSource(audio)
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000)
    metrics = Metrics()
    port = _free_port()
    metrics.serve(port)
    try:
        traces = Loop(stages, source, sink, LoopOptions(target="pt"), observers=[metrics]).run()
        spoken = sum(1 for t in traces if t.translation)
        assert spoken >= 2
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        metrics.close()
    assert f'edge_rt_utterances_total{{outcome="spoken"}} {float(spoken)}' in body
    count = [line for line in body.splitlines() if line.startswith("edge_rt_turn_latency_seconds_count")]
    assert count and float(count[0].split()[-1]) == spoken
    assert 'edge_rt_stage_seconds_bucket{le="+Inf",stage="asr_final"}' in body
    assert "edge_rt_capture_overruns 0.0" in body
    # close() stops the HTTP server thread.
    with socket.socket() as s:
        s.settimeout(1)
        assert s.connect_ex(("127.0.0.1", port)) != 0  # the server is gone after close()
    assert np.isfinite(metrics.lag._value.get())
