"""`edge-rt selftest`: the no-GPU path for real, and the comparison, input and report functions with numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge_rt.backends import compat
from edge_rt.backends.compat import TrtEnvironment
from edge_rt.backends.ort import OrtEngine
from edge_rt.build.tensorrt import bucket_bindings, onnx_inputs, profile_shapes
from edge_rt.ops import selftest as st
from edge_rt.ops.selftest import (SelftestOptions, bucket_shapes, compare_outputs, render_markdown, synthetic_inputs,
                                  unavailable_reason)


def _edge_rt() -> list[str]:
    script = Path(sys.executable).parent / "edge-rt"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "edge_rt"]


def test_without_a_gpu_it_says_skipped_and_exits_0(tmp_path):
    if unavailable_reason() is None:
        pytest.skip("a GPU with TensorRT is present: the self-test runs for real here")
    proc = subprocess.run([*_edge_rt(), "selftest", "--json", "--out", str(tmp_path / "r")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["skipped"] is True and out["reason"].startswith("no GPU") and set(out) == {"skipped", "reason"}
    assert not (tmp_path / "r").exists()
    plain = subprocess.run([*_edge_rt(), "selftest"], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and plain.stdout.startswith("skipped: no GPU") and "Traceback" not in plain.stderr


def test_compare_outputs_with_numbers():
    ref = {"a": np.array([3.0, 4.0]), "b": np.zeros(3), "c": np.ones(2)}
    got = {"a": np.array([3.0, 4.5]), "b": np.array([0.0, 0.2, 0.0]), "c": np.ones(3)}
    r = compare_outputs(ref, got)
    assert r["a"] == {"max_abs": 0.5, "rel_l2": pytest.approx(0.1)}  # |(0, .5)| / |(3, 4)|
    assert r["b"] == {"max_abs": pytest.approx(0.2), "rel_l2": pytest.approx(0.2)}  # zero reference: absolute L2
    assert r["c"] == {"error": "shape (3,), reference (2,)"}
    assert compare_outputs({"x": np.ones(1)}, {}) == {"x": {"error": "missing"}}


@pytest.mark.parametrize("stage,model", [("mt", "en-pt/decoder"), ("vad", "silero"), ("tts", "en")])
def test_synthetic_inputs_are_accepted_by_the_real_models(tiny_pack, stage, model):
    """The inputs built from a build record's opt shapes run through the model on ONNX Runtime."""
    path = tiny_pack.model(stage, model, "fp32")
    inputs = onnx_inputs(path)
    record = {"shapes": json.loads(json.dumps([profile_shapes(inputs, b)
                                                for b in bucket_bindings(stage, model, tiny_pack.stage(stage))]))}
    shapes = bucket_shapes(record)[0]
    eng = OrtEngine(path)
    dtypes = {i.name: np.dtype({"tensor(float)": "float32", "tensor(int64)": "int64"}[i.type])
              for i in eng._session.get_inputs()}
    feed = synthetic_inputs(shapes, dtypes, seed=3)
    out = eng.run(feed)
    assert all(np.isfinite(v).all() for v in out.values())
    if stage == "mt":
        assert feed["vocab_ids"].shape == (1024,) and out["logits"].shape == (1, 1024)  # the profile's opt
        assert (feed["prev_token"] < 128).all() and feed["position"][0] == 0
    if stage == "vad":
        assert int(feed["sr"]) == 16000


def test_markdown_report_with_numbers():
    result = {"skipped": False, "pack": "tiny", "host": "aarch64",
              "environment": TrtEnvironment("10.3.0.30", "Orin (nvgpu)", "8.7", 7620).as_dict(),
              "engines": [{"engine": "asr/encoder", "bucket": 0, "graph": True, "graph_error": None,
                           "graph_ms": 4.25, "plain_ms": 5.5,
                           "outputs": {"cross_k": {"max_abs": 0.01, "rel_l2": 0.002},
                                       "cross_v": {"max_abs": 0.03, "rel_l2": 0.004}}},
                          {"engine": "tts/en", "bucket": 1, "graph": False, "graph_error": "capture failed",
                           "plain_ms": 9.0, "outputs": {"output": {"max_abs": 0.1, "rel_l2": 0.05}}},
                          {"engine": "mt/pt-en/decoder", "error": "fell back to ONNX Runtime at build time"}],
              "accuracy": {"tensorrt": {"ASR en WER %": 5.9, "MT chrF": 51.2},
                           "cpu": {"ASR en WER %": 5.58, "MT chrF": 51.0}},
              "latency": {"error": "RuntimeError: boom"}}
    md = render_markdown(result)
    assert "TensorRT 10.3.0.30 on Orin (nvgpu)" in md
    assert "| asr/encoder | 0 | cross_v | 0.03 | 0.004 | 4.25 | 5.5 | yes |" in md
    assert "| tts/en | 1 | output | 0.1 | 0.05 | – | 9 | no: capture failed |" in md
    assert "| mt/pt-en/decoder | – | error: fell back" in md
    assert "| ASR en WER % | 5.9 | 5.58 |" in md and "| error | RuntimeError: boom |" in md
    assert render_markdown({"skipped": True, "reason": "no GPU: x"}) == "# edge-rt selftest\n\nskipped: no GPU: x\n"


def test_report_is_written_even_when_the_pack_has_no_engines(tmp_path, tiny_pack, monkeypatch):
    monkeypatch.setattr(st, "unavailable_reason", lambda: None)
    monkeypatch.setattr(compat, "current_environment", lambda: TrtEnvironment("10.3.0.30", "Orin (nvgpu)", "8.7", 7620))
    if tiny_pack.manifest["tensorrt"]["status"] == "built":
        pytest.skip("this pack has TensorRT engines")
    result = st.selftest(SelftestOptions(pack=str(tiny_pack.dir), out=tmp_path / "r", accuracy=False, latency=False))
    saved = json.loads((tmp_path / "r" / "selftest.json").read_text())
    assert saved["engines"][0]["engine"] == "all" and "no TensorRT engines" in saved["engines"][0]["error"]
    assert "error: the pack has no TensorRT engines" in (tmp_path / "r" / "selftest.md").read_text()
    assert result["report"].endswith("selftest.md")
