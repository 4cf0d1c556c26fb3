"""The runtime refuses TensorRT engines built for another TensorRT or GPU, naming the rebuild command."""

from __future__ import annotations

import json

import pytest

from edge_rt.backends.compat import EngineCompatibilityError, TrtEnvironment, check, gpu_info, problems
from edge_rt.errors import EdgeRtError, PackNotBuiltError
from edge_rt.pack import BuiltPack

ORIN = TrtEnvironment("10.3.0", "Orin (nvgpu)", "8.7")


def test_same_environment_is_fine():
    assert problems(ORIN, TrtEnvironment("10.3.0.30", "Orin (nvgpu)", "8.7")) == []
    assert problems(ORIN, TrtEnvironment("10.3.1", "Orin", "8.7")) == []  # patch releases are compatible


def test_mismatches_are_named():
    assert "TensorRT 10.3.0" in problems(ORIN, TrtEnvironment("8.6.2", "Orin (nvgpu)", "8.7"))[0]
    found = problems(ORIN, TrtEnvironment("10.3.0", "NVIDIA H200", "9.0"))
    assert len(found) == 1 and "compute capability 8.7" in found[0] and "9.0" in found[0]
    assert problems(ORIN, None) == ["no CUDA GPU with TensorRT is present on this machine"]


def test_check_raises_with_the_rebuild_command():
    with pytest.raises(EngineCompatibilityError) as e:
        check(ORIN, TrtEnvironment("11.0.0", "NVIDIA H200", "9.0"), "default")
    assert isinstance(e.value, EdgeRtError)
    assert "python tools/build_engines.py --pack default --force" in str(e.value)


def test_gpu_probe_never_crashes_without_a_driver():
    info = gpu_info()
    assert info is None or (isinstance(info[0], str) and "." in info[1])


@pytest.fixture
def pack_copy(tmp_path, tiny_pack):
    """The tiny pack's manifest with a TensorRT section from another machine (engine file included)."""
    d = tmp_path / "tiny"
    d.mkdir()
    manifest = json.loads(json.dumps(tiny_pack.manifest))
    (d / "tensorrt").mkdir()
    (d / "tensorrt" / "vad_silero.fp16.plan").write_bytes(b"engine")
    manifest["tensorrt"] = {"status": "built", **ORIN.as_dict(),
                            "engines": {"vad/silero": {"file": "tensorrt/vad_silero.fp16.plan", "precision": "fp16"}}}
    (d / "manifest.json").write_text(json.dumps(manifest))
    return BuiltPack.load(d)


def test_pack_refuses_an_engine_from_another_tensorrt(pack_copy):
    with pytest.raises(EngineCompatibilityError, match="built with TensorRT 10.3.0, this machine has TensorRT 8.6.1"):
        pack_copy.tensorrt_engine("vad", "silero", here=TrtEnvironment("8.6.1", "Orin (nvgpu)", "8.7"))
    assert pack_copy.tensorrt_engine("vad", "silero", here=ORIN).name == "vad_silero.fp16.plan"
    with pytest.raises(PackNotBuiltError, match="no TensorRT engine for asr/encoder"):
        pack_copy.tensorrt_engine("asr", "encoder", here=ORIN)


def test_pack_without_engines_says_why(tiny_pack):
    if tiny_pack.manifest.get("tensorrt", {}).get("status") == "built":
        pytest.skip("this machine built TensorRT engines")
    with pytest.raises(PackNotBuiltError, match="has no TensorRT engines"):
        tiny_pack.tensorrt_engine("asr", "encoder")


def test_cpu_paths_never_import_tensorrt_or_polygraphy():
    import subprocess
    import sys

    code = ("import sys, edge_rt, edge_rt.pack, edge_rt.backends.compat, edge_rt.build.tensorrt, edge_rt.build.calibration.int8; "
            "edge_rt.backends.compat.current_environment(); "
            "print(sorted(m for m in ('tensorrt', 'polygraphy', 'pycuda') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
