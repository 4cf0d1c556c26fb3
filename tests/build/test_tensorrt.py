"""The TensorRT path's pure logic on CPU (profiles per bucket, precision choice, the skip), and the GPU build where present."""

from __future__ import annotations

import importlib.util
import json

import pytest

from edge_rt.build.tensorrt import (TIMING_CACHE, BuildRequest, TensorRtBuildError, TensorRtOptions, attempts,
                                    bucket_bindings, build_engines, engine_precision, onnx_inputs, profile_shapes,
                                    restamp_calibration_cache)
from edge_rt.backends.compat import TrtEnvironment, auto_backend_reason, current_environment
from edge_rt.build.calibration.table import parse_trt_cache, trt_cache_text
from edge_rt.pack import BuiltPack
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
    twin = {**static, "trt": {"file": "int8_trt/x.onnx", "backend": "tensorrt"}}
    dynamic = {"precision": "int8", "recipe": {"mode": "dynamic"}}
    fell_back = {"precision": "fp32", "calibration_tables": None}
    assert engine_precision(twin, False) == ("int8", "int8_trt")  # the symmetric Q/DQ twin made for TensorRT
    assert engine_precision(static, False) == ("fp16", "fp32")  # the CPU's asymmetric INT8 never goes to TensorRT
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


ORIN = TrtEnvironment("10.3.0.30", "Orin (nvgpu)", "8.7", 7620)


def tensorrt_like_builder(calls):
    """Stands in for TensorRT on CPU with its two refusals that matter here: an ONNX file it cannot
    parse, and explicit-quantization Q/DQ with a non-zero zero point (TensorRT takes only symmetric INT8)."""
    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import uses_external_data

    def build(req: BuildRequest) -> dict:
        calls.append((req.src.name, req.precision))
        # the parser; the weights file (build/files.py) is TensorRT's to read, and onnx refuses one behind
        # the fixture's symlinks. Zero points stay in the graph file: an activation's is one number.
        model = onnx.load(str(req.src), load_external_data=False)
        if req.precision == "int8":
            inits = {i.name: i for i in model.graph.initializer if not uses_external_data(i)}
            for node in model.graph.node:
                if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 2:
                    zp = inits.get(node.input[2])
                    if zp is not None and numpy_helper.to_array(zp).any():
                        raise RuntimeError(f"{node.name}: TensorRT only supports symmetric INT8 (zero point 0)")
        req.timing_cache.write_bytes(b"timing")
        req.dst.write_bytes(b"plan:" + req.src.name.encode() + req.precision.encode())
        return {"activation_bytes": 1 << 20}
    return build


@pytest.fixture
def pack_dir(tmp_path, tiny_pack):
    """The tiny pack's ONNX files (linked), with the pt-en Marian decoder replaced by bytes no parser reads."""
    d = tmp_path / "tiny"
    (d / "fp32").mkdir(parents=True)
    for f in (tiny_pack.dir / "fp32").iterdir():
        (d / "fp32" / f.name).symlink_to(f)
    (d / "fp32" / "marian_pt-en_decoder.onnx").unlink()
    (d / "fp32" / "marian_pt-en_decoder.onnx").write_bytes(b"not an onnx model")
    (d / "int8").symlink_to(tiny_pack.dir / "int8")
    if (tiny_pack.dir / "int8_trt").is_dir():
        (d / "int8_trt").symlink_to(tiny_pack.dir / "int8_trt")
    return d


def test_one_model_failing_falls_back_and_the_pack_is_still_written(pack_dir, tiny_pack, request):
    from edge_rt.build.report import render_report

    manifest = json.loads(json.dumps(tiny_pack.manifest))
    stages = {k: manifest["stages"][k] for k in ("asr", "mt")}
    # The encoder's TensorRT twin replaced by a CPU INT8 Whisper encoder, asymmetric: a twin TensorRT must refuse.
    # The tiny encoder's own where the build kept it INT8; its gate is machine-bound (an AVX2 build kept FP32),
    # so else the default pack's (recorded in tests/build/pack_choices.json; only its Q/DQ nodes are read).
    enc_files = stages["asr"]["models"]["encoder"]
    asymmetric = enc_files.get("int8")
    if asymmetric is None:
        default = request.getfixturevalue("default_pack")
        (pack_dir / "asym").mkdir()
        for name in ("whisper_encoder.onnx", "whisper_encoder.onnx.data"):
            if (default.dir / "int8" / name).exists():
                (pack_dir / "asym" / name).symlink_to(default.dir / "int8" / name)
        asymmetric = "asym/whisper_encoder.onnx"
    enc_files["int8_trt"] = asymmetric
    manifest["int8"]["stages"]["asr"]["models"]["encoder"]["trt"] = {"file": asymmetric, "backend": "tensorrt"}
    # The unreadable pt-en decoder has no TensorRT twin: TensorRT gets the broken FP32 file.
    manifest["int8"]["stages"]["mt"]["models"]["pt-en/decoder"].pop("trt", None)
    calls, lines = [], []
    section = build_engines(pack_dir, stages, manifest["int8"], {}, TensorRtOptions(), log=lines.append,
                            environment=lambda: ORIN, builder=tensorrt_like_builder(calls))
    engines = section["engines"]
    assert section["status"] == "built" and section["tensorrt_version"] == "10.3.0.30"
    assert section["gpu_memory_mb"] == 7620 and section["compute_capability"] == "8.7"
    enc = engines["asr/encoder"]  # asymmetric Q/DQ: TensorRT refuses, FP16 serves
    assert enc["backend"] == "tensorrt" and enc["precision"] == "fp16" and enc["source"] == "fp32/whisper_encoder.onnx"
    assert enc["fallbacks"][0]["from"] == "int8" and "symmetric INT8" in enc["fallbacks"][0]["reason"]
    bad = engines["mt/pt-en/decoder"]
    assert bad["backend"] == "onnxruntime" and bad["file"] is None
    assert bad["fallbacks"][0]["to"] == "onnxruntime" and "DecodeError" in bad["fallbacks"][0]["reason"]
    ok = engines["mt/en-pt/decoder"]
    assert ok["backend"] == "tensorrt" and ok["fallbacks"] == [] and ok["activation_bytes"] == 1 << 20
    assert ok["shapes"][0]["vocab_ids"] == [[64], [1024], [32000]] and (pack_dir / ok["file"]).is_file()
    assert section["fallbacks"] == 2 and any("falling back to onnxruntime" in ln for ln in lines)
    manifest["stages"], manifest["tensorrt"] = stages, section
    (pack_dir / "manifest.json").write_text(json.dumps(manifest))
    pack = BuiltPack.load(pack_dir)
    assert auto_backend_reason(pack, here=ORIN)[0] == "tensorrt"
    assert "mt/pt-en/decoder" in render_report(manifest)

    calls.clear()  # a second build keeps every engine and reuses the timing cache
    again = build_engines(pack_dir, stages, manifest["int8"], manifest, TensorRtOptions(), log=lines.append,
                          environment=lambda: ORIN, builder=tensorrt_like_builder(calls))
    assert again["timing_cache_reused"] and (pack_dir / TIMING_CACHE).read_bytes() == b"timing"
    assert again["engines"]["mt/en-pt/decoder"] == ok and ("whisper_encoder.onnx", "fp16") not in calls


def test_fallback_order():
    assert attempts("int8", "int8_trt") == [("int8", "int8_trt"), ("fp16", "fp32")]
    assert attempts("int8", "fp32") == [("int8", "fp32"), ("fp16", "fp32")]
    assert attempts("fp16", "fp32") == [("fp16", "fp32")]


def test_calibration_cache_is_stamped_with_the_real_version():
    text = trt_cache_text({"x": (-1.0, 2.54)})  # written on a CPU: the default 10.3.0 header
    version, scales = parse_trt_cache(restamp_calibration_cache(text, "10.7.0.23"))
    assert version == 100700 and scales == parse_trt_cache(text)[1]
    with pytest.raises(Exception, match="not a TensorRT entropy calibration cache"):
        restamp_calibration_cache("garbage\n", "10.7.0")
