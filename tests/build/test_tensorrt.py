"""The TensorRT path's pure logic on CPU (profiles per bucket, precision choice, the skip), and the GPU build where present."""

from __future__ import annotations

import importlib.util
import json

import pytest

from edge_rt.build.tensorrt import (TensorRtBuildError, TensorRtOptions, bucket_bindings, build_engines,
                                    engine_precision, onnx_inputs, profile_shapes)
from edge_rt.backends.compat import current_environment
from edge_rt.units import bucket_frames, bucket_positions


def test_whisper_profiles_one_per_bucket(tiny_pack):
    entry = tiny_pack.stage("asr")
    enc = onnx_inputs(tiny_pack.model("asr", "encoder", "fp32"))
    profiles = [profile_shapes(enc, b) for b in bucket_bindings("asr", "encoder", entry)]
    assert len(profiles) == len(entry["buckets_s"])
    for seconds, p in zip(sorted(entry["buckets_s"]), profiles):
        shape = (1, 80, bucket_frames(seconds))
        assert p["mel"] == (shape, shape, shape)  # static bucket: min = opt = max
    dec = onnx_inputs(tiny_pack.model("asr", "decoder", "fp32"))
    p = profile_shapes(dec, bucket_bindings("asr", "decoder", entry)[0])
    assert p["cross_k_0"][0][-1] == bucket_positions(sorted(entry["buckets_s"])[0]) and p["tokens"][0] == (1, 1)


def test_marian_decoder_profiles_have_a_vocab_range(tiny_pack):
    entry = tiny_pack.stage("mt")
    inputs = onnx_inputs(tiny_pack.model("mt", "en-pt/decoder", "fp32"))
    profiles = [profile_shapes(inputs, b) for b in bucket_bindings("mt", "en-pt/decoder", entry)]
    assert len(profiles) == len(entry["src_buckets"])
    lo, opt, hi = profiles[0]["vocab_ids"]
    assert lo == (64,) and opt == (1024,) and hi[0] >= entry["vocab_size"] and hi[0] % 64 == 0
    assert profiles[-1]["src_mask"][0] == (1, entry["src_buckets"][-1])


def test_piper_and_vad_profiles(tiny_pack):
    tts = tiny_pack.stage("tts")
    inputs = onnx_inputs(tiny_pack.model("tts", "en", "fp32"))
    shapes = [profile_shapes(inputs, b)["input"][0] for b in bucket_bindings("tts", "en", tts)]
    assert shapes == [(1, n) for n in tts["phoneme_buckets"]]
    vad = profile_shapes(onnx_inputs(tiny_pack.model("vad", "silero", "fp32")), bucket_bindings("vad", "silero", {})[0])
    assert vad["input"][0] == (1, 576) and vad["state"][0] == (2, 1, 128) and vad["sr"][0] == ()


def test_unbound_dimension_is_named():
    with pytest.raises(TensorRtBuildError, match="'frames'"):
        profile_shapes({"mel": [1, 80, "frames"]}, {"positions": 250})


def test_precision_choice():
    static = {"precision": "int8", "recipe": {"mode": "static"}, "calibration_tables": "int8/x.calibration"}
    dynamic = {"precision": "int8", "recipe": {"mode": "dynamic"}}
    fell_back = {"precision": "fp32", "calibration_tables": None}
    assert engine_precision(static, False) == ("int8", "int8")  # explicit Q/DQ
    assert engine_precision(dynamic, False) == ("fp16", "fp32")  # TensorRT has no DynamicQuantizeLinear
    assert engine_precision(fell_back, False) == ("fp16", "fp32")  # FP16 where INT8 fell back
    assert engine_precision(None, False) == ("fp16", "fp32")
    implicit = {"precision": "fp32", "calibration_tables": "int8/x.calibration"}
    assert engine_precision(implicit, True) == ("int8", "fp32")  # IInt8EntropyCalibrator2 from the cache


def test_without_gpu_the_build_says_why(tmp_path):
    lines = []
    section = build_engines(tmp_path, {}, {}, {}, TensorRtOptions(), log=lines.append, environment=lambda: None)
    assert section["status"] == "skipped" and "GPU" in section["reason"]
    assert any("skipped" in ln for ln in lines)
    assert build_engines(tmp_path, {}, {}, {}, TensorRtOptions(enabled=False))["reason"].startswith("disabled")
    assert list(tmp_path.iterdir()) == []


def test_built_packs_record_the_skip(tiny_pack):
    trt = tiny_pack.manifest["tensorrt"]
    if trt["status"] == "skipped":
        assert trt["reason"]
    else:
        assert {"tensorrt_version", "gpu_name", "compute_capability", "engines"} <= set(trt)


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is None, reason="TensorRT is not installed (JetPack only)")
def test_engine_build_on_gpu(tmp_path, tiny_pack):
    env = current_environment()
    if env is None:
        pytest.skip("no CUDA GPU/driver on this machine")
    stages = {"vad": json.loads(json.dumps(tiny_pack.stage("vad")))}
    section = build_engines(tiny_pack.dir, stages, tiny_pack.manifest.get("int8", {}), {}, TensorRtOptions(force=True))
    assert section["status"] == "built" and "vad/silero" in section["engines"]
