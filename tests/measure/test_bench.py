"""The bench's pure parts: the regression check on the live/serial ratio, the oracle end of speech."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.measure.bench import check_regression, latency_ratio, oracle_end
from edge_rt.errors import EdgeRtError


def _result(live: float, serial: float) -> dict:
    return {"turn_latency_ms": {"p50": live}, "baseline_turn_latency_ms": {"p50": serial}}


def test_regression_check_passes_within_tolerance_and_fails_beyond():
    recorded = {"ratio_p50": 0.34, "tolerance": 0.25}
    ok, msg = check_regression(_result(400, 1000), recorded)  # 0.40 <= 0.425
    assert ok and "ok" in msg
    ok, msg = check_regression(_result(450, 1000), recorded)  # 0.45 > 0.425
    assert not ok and "REGRESSION" in msg


def test_a_run_without_latency_is_an_error_not_a_pass():
    with pytest.raises(EdgeRtError, match="no latency"):
        latency_ratio(_result(None, 1000))


class _FakeVadProbs:
    """Stands in for the VAD's per-frame probabilities only (the oracle's arithmetic is under test)."""

    def __init__(self, probs):
        self._p = np.asarray(probs, np.float32)

    def probabilities(self, audio):
        return self._p


def test_oracle_end_is_one_past_the_last_speech_frame():
    assert oracle_end(_FakeVadProbs([0.1, 0.9, 0.8, 0.2, 0.6, 0.1]), np.zeros(6 * 512, np.float32)) == 5 * 512
    assert oracle_end(_FakeVadProbs([0.1, 0.2]), np.zeros(1024, np.float32)) == 1024  # no speech: the clip end
