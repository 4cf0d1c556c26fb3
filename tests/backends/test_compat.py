"""The runtime refuses TensorRT engines built for another TensorRT or GPU, naming the rebuild command."""

from __future__ import annotations

import json

import pytest

from edge_rt.backends.compat import (EngineCompatibilityError, TrtEnvironment, auto_backend_reason, check, gpu_info, notes,
                                    problems)
from edge_rt.errors import EdgeRtError, PackNotBuiltError
from edge_rt.pack import BuiltPack

ORIN = TrtEnvironment("10.3.0", "Orin (nvgpu)", "8.7")


def test_same_environment_is_fine():
    assert problems(ORIN, TrtEnvironment("10.3.0", "Orin (nvgpu)", "8.7", 7620)) == []


def test_versions_and_gpus_compare_exactly():
    assert problems(ORIN, TrtEnvironment("10.3.0.30", "Orin (nvgpu)", "8.7")) == [
        "built with TensorRT 10.3.0, this machine has TensorRT 10.3.0.30"]
    assert "TensorRT 10.3.0" in problems(ORIN, TrtEnvironment("10.3.1", "Orin (nvgpu)", "8.7"))[0]
    found = problems(ORIN, TrtEnvironment("10.3.0", "NVIDIA H200", "9.0"))
    assert len(found) == 1 and "compute capability 8.7" in found[0] and "9.0" in found[0]
    assert problems(ORIN, TrtEnvironment("10.3.0", "NVIDIA Jetson AGX Orin", "8.7")) == [
        "built on GPU 'Orin (nvgpu)', this GPU is 'NVIDIA Jetson AGX Orin'"]
    assert problems(ORIN, None) == ["no CUDA GPU with TensorRT is present on this machine"]


def test_memory_is_recorded_but_only_informational():
    small = TrtEnvironment("10.3.0", "Orin (nvgpu)", "8.7", 7620)
    big = TrtEnvironment("10.3.0", "Orin (nvgpu)", "8.7", 15_000)
    assert problems(small, big) == [] and notes(small, big) == ["built on a GPU with 7620 MB, this one has 15000 MB"]
    assert TrtEnvironment.from_dict(small.as_dict()) == small
    assert TrtEnvironment.from_dict({"tensorrt_version": "10.3.0", "gpu_name": "x", "compute_capability": "8.7"}).gpu_memory_mb is None


def test_check_raises_with_the_rebuild_command():
    with pytest.raises(EngineCompatibilityError) as e:
        check(ORIN, TrtEnvironment("11.0.0", "NVIDIA H200", "9.0"), "default")
    assert isinstance(e.value, EdgeRtError)
    assert "python tools/build_engines.py --pack default --force" in str(e.value)


def test_auto_picks_tensorrt_only_for_engines_built_here(pack_copy, tiny_pack):
    backend, why = auto_backend_reason(pack_copy, here=ORIN)
    assert backend == "tensorrt" and "10.3.0" in why
    backend, why = auto_backend_reason(pack_copy, here=TrtEnvironment("10.3.0", "NVIDIA H200", "9.0"))
    assert backend == "cpu" and "compute capability" in why and "--pack tiny --force" in why
    assert auto_backend_reason(pack_copy, here=None) == ("cpu", "no CUDA GPU with TensorRT is present on this machine")
    if tiny_pack.manifest["tensorrt"]["status"] != "built":
        backend, why = auto_backend_reason(tiny_pack)
        assert backend == "cpu" and "no TensorRT engines" in why


def test_gpu_probe_never_crashes_without_a_driver():
    info = gpu_info()
    assert info is None or (isinstance(info[0], str) and "." in info[1] and info[2] > 0)


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
    with pytest.raises(EngineCompatibilityError, match="built with TensorRT 10.3.0, this machine has TensorRT 10.3.1"):
        pack_copy.tensorrt_engine("vad", "silero", here=TrtEnvironment("10.3.1", "Orin (nvgpu)", "8.7"))
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
