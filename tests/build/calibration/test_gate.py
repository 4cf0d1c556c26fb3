"""Accuracy gates: pass/fail logic, F1, the real gates on the built packs, and Polygraphy's tensor comparison."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from edge_rt.build.files import sha256_file
from edge_rt.build.calibration.gate import GATE_LIMITS, GateResult, compare_tensors, f1
from tests.build.calibration.test_calibrate import feeds, mlp


def test_gate_directions():
    assert GateResult("asr", "WER", 0.05, 0.059, 0.01, 12, "").passed
    assert not GateResult("asr", "WER", 0.05, 0.0605, 0.01, 12, "").passed
    assert GateResult("mt", "chrF", 70.0, 69.1, -1.0, 30, "").passed
    assert not GateResult("mt", "chrF", 70.0, 68.9, -1.0, 30, "").passed
    assert GateResult("vad", "F1", 0.90, 0.95, -0.01, 100, "").passed  # better is never a failure
    assert not GateResult("tts", "WER", 0.05, 0.0701, 0.02, 20, "").passed
    d = GateResult("asr", "WER", 0.05, 0.06, 0.01, 12, "x").as_dict()
    assert d["passed"] and d["delta"] == pytest.approx(0.01)
    assert set(GATE_LIMITS) == {"asr", "mt", "tts", "vad"}


def test_f1():
    assert f1(np.array([1, 1, 0, 0]), np.array([1, 0, 1, 0])) == pytest.approx(0.5)
    assert f1(np.zeros(4), np.zeros(4)) == 1.0
    assert f1(np.ones(4), np.zeros(4)) == 0.0


@pytest.mark.skipif(importlib.util.find_spec("polygraphy") is None, reason="polygraphy==0.53.6 is not installed")
def test_polygraphy_comparator_records_errors(tmp_path):
    a = mlp(tmp_path / "a.onnx", seed=0)
    b = mlp(tmp_path / "b.onnx", seed=0)
    same = compare_tensors(a, b, feeds(2))
    assert same["allclose"] and same["outputs"]["y"]["max_abs"] == 0.0 and same["inputs"] == 2
    other = compare_tensors(a, mlp(tmp_path / "c.onnx", seed=5), feeds(2))
    assert not other["allclose"] and other["outputs"]["y"]["rel_l2"] > 0.1
    assert compare_tensors(a, b, [])["skipped"]


@pytest.mark.parametrize("pack_name", ["tiny", "default"])
def test_built_packs_record_every_int8_decision(pack_name, request):
    pack = request.getfixturevalue(f"{pack_name}_pack")
    int8 = pack.manifest["int8"]
    assert int8["calibration_set"]["audio_samples"] >= 512
    assert set(int8["calibration_set"]["kinds"]) >= {"speech", "music", "noise", "silence", "plosives"}
    for stage, rec in int8["stages"].items():
        for model, m in rec["models"].items():
            entry = pack.stage(stage)["models"][model]
            if m["precision"] == "int8":
                assert m["gate"]["passed"] and entry["int8"] == m["int8"], f"{stage}/{model}"
                assert m["speed"] and all(s["threads"] == 2 for s in m["speed"])
                for rel, sha in m["files"].items():
                    assert sha256_file(pack.dir / rel) == sha, rel
                if m["recipe"]["mode"] == "static":
                    assert m["calibration"] == "entropy" and m["calibration_samples"] > 0
                    cache = (pack.dir / m["calibration_tables"] / "trt_entropy.cache").read_text()
                    assert cache.startswith("TRT-") and "-EntropyCalibration2\n" in cache
            else:
                assert "int8" not in entry and m["fallback"].startswith("FP32"), f"{stage}/{model}"
    report = (pack.dir / "build_report.md").read_text()
    assert "## Models" in report and "## ONNX Runtime speed" in report and "## TensorRT" in report


def test_whisper_encoder_int8_is_gated_and_not_slower(default_pack):
    """The build kept it by its own rules: the gate passed and the measured speed ratio reached the floor
    (how much faster is the machine's, measured by the build: x1.34-1.38 on a VNNI machine, x0.99-1.02 on
    an AVX2 EPYC; a figure for `bench`, not a test)."""
    from edge_rt.build.calibration.plan import Int8Options

    m = default_pack.manifest["int8"]["stages"]["asr"]["models"]["encoder"]
    assert m["precision"] == "int8" and m["recipe"]["mode"] == "static"
    assert m["gate"]["metric"] == "WER" and m["gate"]["delta"] <= 0.010
    assert m["mean_speedup"] >= Int8Options().min_speedup
    assert m["mean_speedup"] == round(sum(s["speedup"] for s in m["speed"]) / len(m["speed"]), 2)


@pytest.mark.parametrize("pack_name", ["tiny", "default"])
def test_whisper_gates_count_enough_words_and_report_intervals(pack_name, request):
    """Issue 11: a gate that decides on ~215 words flips with one word; >= 2,000 words with an interval."""
    pack = request.getfixturevalue(f"{pack_name}_pack")
    for model, m in pack.manifest["int8"]["stages"]["asr"]["models"].items():
        for a in m.get("attempts", []):
            g = a.get("gate")
            if not g or g.get("rule") == "screen":
                continue
            assert g["rule"] == "upper95" and g["words"] >= 2000, f"asr/{model} {a['recipe']}: {g}"
            assert g["ci95"][0] <= g["delta"] <= g["ci95"][1]
            assert g["passed"] == (g["ci95"][1] <= g["limit"] + 1e-12)
    report = (pack.dir / "build_report.md").read_text()
    assert "## Accuracy gates" in report and "| upper95 |" in report
