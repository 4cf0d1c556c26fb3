"""Prometheus metrics and one JSON log line per utterance, as a loop observer.

Opt-in: ``edge-rt run --metrics-port N`` (or ``[metrics] port`` in the service
config) serves ``/metrics`` on 127.0.0.1 unless another address is configured.
Each loop gets its own registry, so two loops in one process never collide.
"""

from __future__ import annotations

import json
import logging

from edge_rt.errors import EdgeRtError
from edge_rt.loop.observer import LoopObserver
from edge_rt.loop.trace import UtteranceTrace

log = logging.getLogger("edge_rt.utterance")

# Turn latency and stage times: 10 ms .. 10 s.
BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class Metrics(LoopObserver):
    """Histograms of turn latency and per-stage times; counters of utterances, errors, ring events."""

    def __init__(self):
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError as e:
            raise EdgeRtError(f"metrics need prometheus-client ({e}); `pip install prometheus-client`") from e
        self.registry = CollectorRegistry()
        r = self.registry
        self.turn = Histogram("edge_rt_turn_latency_seconds",
                              "End of speech to first sounding translated sample at the device",
                              buckets=BUCKETS_S, registry=r)
        self.stage = Histogram("edge_rt_stage_seconds", "Time spent in each stage of an utterance", ["stage"],
                               buckets=BUCKETS_S, registry=r)
        self.utterances = Counter("edge_rt_utterances_total", "Utterances by outcome", ["outcome"], registry=r)
        self.errors = Counter("edge_rt_stage_errors_total", "Stage errors (the utterance was dropped)", registry=r)
        self.overruns = Gauge("edge_rt_capture_overruns", "Capture ring overrun events", registry=r)
        self.dropped = Gauge("edge_rt_capture_dropped_samples", "Capture samples lost to overruns", registry=r)
        self.underruns = Gauge("edge_rt_playback_underruns", "Playback reads that found too little audio", registry=r)
        self.lag = Gauge("edge_rt_capture_lag_seconds", "Audio captured but not yet processed", registry=r)
        self._loop = None
        self._server = None

    def serve(self, port: int, bind: str = "127.0.0.1") -> None:
        """Serve /metrics over HTTP (loopback unless told otherwise)."""
        from prometheus_client import start_http_server

        try:
            self._server = start_http_server(port, addr=bind, registry=self.registry)
        except OSError as e:
            raise EdgeRtError(f"cannot serve metrics on {bind}:{port}: {e}; pick a free port with --metrics-port") from e

    def close(self) -> None:
        if self._server is not None:
            server, _thread = self._server
            server.shutdown()
            self._server = None

    # -- observer hooks ---------------------------------------------------------
    def on_start(self, loop) -> None:
        self._loop = loop

    def on_tick(self) -> None:
        loop = self._loop
        if loop is None:
            return
        cap = loop.source.ring.stats
        self.overruns.set(cap.overruns)
        self.dropped.set(cap.dropped)
        self.lag.set(loop.source.ring.available() / 16000)
        ring = getattr(loop.sink, "ring", None)
        if ring is not None:
            self.underruns.set(ring.stats.underruns)

    def on_utterance(self, trace: UtteranceTrace) -> None:
        outcome = "dropped" if trace.dropped else "spoken"
        self.utterances.labels(outcome).inc()
        if trace.turn_latency_ms is not None:
            self.turn.observe(trace.turn_latency_ms / 1000)
        for stage, ms in trace.stages_ms().items():
            if ms is not None and ms >= 0:
                self.stage.labels(stage).observe(ms / 1000)
        log.info(json.dumps({"utterance": trace.utterance, "lang": trace.lang, "outcome": outcome,
                             "turn_latency_ms": trace.turn_latency_ms, "stages_ms": trace.stages_ms(),
                             "text": trace.text, "translation": trace.translation, "dropped": trace.dropped},
                            ensure_ascii=False))

    def on_error(self, exc: BaseException, trace: UtteranceTrace | None) -> None:
        self.errors.inc()
