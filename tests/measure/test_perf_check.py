"""The perf-regression check can fail: a 2x slower stage fails it, a 2x slower machine does not.

The slow tests time the real pack's stages on the clips of tests/perf_check.json against the
recorded reference, exactly as `edge-rt bench --check` does (without the real-time loop, which
the check runs too but which is timed in wall-clock seconds), with the bench's test-only
slowdown hook (edge_rt/measure/slowdown.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_rt.errors import EdgeRtError
from edge_rt.measure.bench import BenchOptions, bench
from edge_rt.measure.perf_check import CHECKED_STAGES, check_regression, record_check
from edge_rt.measure.slowdown import Slowdown

CHECK_FILE = Path(__file__).resolve().parents[1] / "perf_check.json"


def _result(relative: dict, live=None, serial=None, failed=()) -> dict:
    return {"speed": {"relative": relative, "stages_ms": dict.fromkeys(relative, 1.0),
                      "probe_ms": {"1_threads": 20.0, "2_threads": 10.0}},
            "turn_latency_ms": {"p50": live}, "serial_ms": {"p50": serial}, "failed": list(failed)}


REF = {"relative": {"vad": 8.0, "asr": 80.0, "mt": 4.0, "tts": 2.0}, "tolerance": 0.5}


def test_check_passes_within_tolerance_and_names_the_stage_beyond_it():
    ok, msg = check_regression(_result({"vad": 8.0, "asr": 110.0, "mt": 5.0, "tts": 2.9}, 400, 900), REF)
    assert ok and msg.endswith("perf check: ok"), msg
    ok, msg = check_regression(_result({"vad": 8.0, "asr": 80.0, "mt": 6.1, "tts": 2.0}, 400, 900), REF)
    assert not ok and "mt " in msg.splitlines()[2] and "REGRESSION" in msg.splitlines()[2], msg


def test_check_fails_when_a_clip_failed():
    same = dict(REF["relative"])
    ok, msg = check_regression(_result(same, 400, 900, failed=["en_jfk"]), REF)
    assert not ok and "en_jfk" in msg
    ok, msg = check_regression(_result(same, 400, 900), REF)
    assert ok and "live turn P50 400 ms vs serial 900 ms (x2.25" in msg, msg


def test_a_run_without_stage_timings_is_an_error_not_a_pass():
    with pytest.raises(EdgeRtError, match="no stage timings"):
        check_regression({"turn_latency_ms": {"p50": 400}}, REF)


def test_slowdown_spec_parses_and_rejects_nonsense():
    assert Slowdown.parse("asr=2").factor("asr") == 2.0 and Slowdown.parse("asr=2").factor("probe") == 1.0
    everything = Slowdown.parse("all=2")
    assert all(everything.factor(s) == 2.0 for s in ("vad", "asr", "mt", "tts", "probe"))
    assert not Slowdown.parse("")
    for bad in ("asr", "gpu=2", "asr=0.5"):
        with pytest.raises(EdgeRtError, match="stage=factor"):
            Slowdown.parse(bad)


# -- the real pack ------------------------------------------------------------------------------
# Three timings per clip for the slowed runs instead of the recorded five (CI time). Each timed call is paired with
# the probe windows on either side of it (perf_check.measure_speed): the unpaired figure (fastest call over fastest
# window) moved by x1.2-x1.5 between runs here, and a TTS slowed 2x once measured x1.36 against a reference
# recorded a minute earlier (CI, 2026-12-06). Paired, runs moved by x1.13-x1.17 and a slowed stage x1.9-x2.3
# (python tools/perf_spread.py).
REPEATS = 3


def _bench(slowdown: str = "", repeats: int = REPEATS) -> dict:
    recorded = json.loads(CHECK_FILE.read_text())
    return bench(BenchOptions(pack=recorded["pack"], precision=recorded["precision"], clips=tuple(recorded["clips"]),
                              live=False, speed_repeats=min(repeats, recorded["repeats"]), slowdown=slowdown))


@pytest.fixture(scope="module")
def reference_here(default_pack, tmp_path_factory) -> dict:
    """The unslowed tree recorded on this machine, in this run, as `edge-rt bench --record` does.

    Not tests/perf_check.json: that was recorded on another CPU, where a stage's time in probe units
    differs by up to ~30 % (CI's runner: TTS at x0.74 of the recorded figure, so TTS slowed 2x measured
    x1.48 against it and passed). Whether a 2x slower stage fails the check is a question about one
    machine; the recorded file against this machine is what tools/test.sh checks after pytest.
    """
    clips = json.loads(CHECK_FILE.read_text())["clips"]
    repeats = json.loads(CHECK_FILE.read_text())["repeats"]
    return record_check(_bench(repeats=repeats), clips, tmp_path_factory.mktemp("perf") / "check.json")


def _check(reference: dict, slowdown: str) -> tuple[bool, str, dict]:
    result = _bench(slowdown)
    ok, msg = check_regression(result, reference)
    return ok, msg, result


@pytest.mark.slow
def test_stages_twice_as_slow_fail_the_check_and_are_named(reference_here):
    ok, msg, result = _check(reference_here, "asr=2,tts=2")
    assert not ok, msg
    flagged = [line.split()[0] for line in msg.splitlines() if "REGRESSION" in line and "probes" in line]
    assert flagged == ["asr", "tts"], msg  # each slowed stage by name, and no other
    assert set(result["speed"]["relative"]) == set(CHECKED_STAGES)


@pytest.mark.slow
def test_a_machine_twice_as_slow_passes_the_check(reference_here):
    ok, msg, result = _check(reference_here, "all=2")
    assert ok, msg
    assert set(result["speed"]["probe_ms"]) == {"1_threads", "2_threads"}
