"""`edge-rt doctor` on this machine: no GPU is a finding, not a failure; a missing audio device blocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from edge_rt.config import Config
from edge_rt.backends.compat import TrtEnvironment
from edge_rt.ops.doctor import Check, Gpu, probe_gpu
from edge_rt.ops.doctor_pack import check_auto_backend, check_memory, check_pack, check_tensorrt_engines
from edge_rt.pack import BuiltPack
from tests.jack import RATE




def _doctor(config, *extra):
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "doctor", "--config", str(config), "--json", *extra],
                          capture_output=True, text=True, timeout=120, env=os.environ)
    return proc, json.loads(proc.stdout)


def _by_name(report) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_no_gpu_is_not_fatal_and_jack_devices_pass(jack, default_pack, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'[audio]\ndevice_in = "0"\ndevice_out = "0"\nrate_in = {RATE}\nrate_out = {RATE}\n'
                      f'[record]\ndir = "{tmp_path / "rec"}"\n')
    proc, report = _doctor(config)
    checks = _by_name(report)
    assert proc.returncode == 0 and report["ok"], proc.stdout
    if not probe_gpu().present:  # this machine: CPU backend
        assert checks["gpu"]["status"] == "info" and "CPU backend" in checks["gpu"]["message"]
        assert checks["tensorrt"]["status"] == "info"
    assert checks["audio input"]["status"] == "ok" and f"{RATE}" in checks["audio input"]["message"]
    assert checks["pack"]["status"] == "ok" and checks["config"]["status"] == "ok"
    assert checks["disk"]["status"] == "ok"
    assert all(c["status"] in ("ok", "info", "warn", "fail") and c["message"] for c in report["checks"])


def test_missing_audio_device_blocks(jack, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[audio]\ndevice_in = "No Such Headset"\n')
    proc, report = _doctor(config, "--quick")
    assert proc.returncode == 1 and not report["ok"]
    check = _by_name(report)["audio input"]
    assert check["status"] == "fail" and "No Such Headset" in check["message"] and "edge-rt devices" in check["message"]


def test_bad_config_is_a_failed_check(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[loop]\nhangover = 300\n')
    proc, report = _doctor(config, "--quick")
    assert proc.returncode == 1
    assert "did you mean 'loop.hangover_ms'" in _by_name(report)["config"]["message"]


def test_pack_hashes_are_checked(default_pack, tmp_path):
    """A pack whose manifest records sha256: a changed byte fails the check and names the file."""
    import json as _json
    import shutil

    from edge_rt.build.files import sha256_file

    pack = tmp_path / "p"
    shutil.copytree(default_pack.dir / "assets" / "asr", pack / "assets" / "asr")
    manifest = {"pack": "p", "stages": {s: {"models": {}, "assets": {}} for s in ("vad", "mt", "tts")}}
    tok = "assets/asr/tokenizer.json"
    manifest["stages"]["asr"] = {"models": {}, "assets": {"tokenizer": tok}, "sha256": {tok: sha256_file(pack / tok)}}
    (pack / "manifest.json").write_text(_json.dumps(manifest))
    config = Config().override(pack__name=str(pack))
    assert {c.name: c.status for c in check_pack(config, Gpu(False), None)}["pack asr"] == "ok"
    with open(pack / tok, "ab") as f:
        f.write(b" ")
    bad = {c.name: c for c in check_pack(config, Gpu(False), None)}["pack asr"]
    assert bad.status == "fail" and tok in bad.message and "--force" in bad.message
    # a file named only by the hashes (a model's weights file, build/files.py) that is gone: named as missing
    gone = "fp32/whisper_decoder.onnx.data"
    manifest["stages"]["asr"]["sha256"][gone] = "0" * 64
    (pack / "manifest.json").write_text(_json.dumps(manifest))
    bad = {c.name: c for c in check_pack(config, Gpu(False), None)}["pack asr"]
    assert bad.status == "fail" and f"missing files: {gone}" in bad.message


ORIN = TrtEnvironment("10.3.0.30", "Orin (nvgpu)", "8.7", 7620)


@pytest.fixture
def trt_pack(tmp_path, tiny_pack):
    """The tiny pack's manifest with the tensorrt section build/tensorrt.py writes (one plan, one fall-back)."""
    d = tmp_path / "tiny"
    (d / "tensorrt").mkdir(parents=True)
    for sub in ("fp32", "int8", "assets"):
        (d / sub).symlink_to(tiny_pack.dir / sub)
    (d / "tensorrt" / "vad_silero.fp16.plan").write_bytes(b"x" * 4096)
    manifest = json.loads(json.dumps(tiny_pack.manifest))
    from edge_rt.build.files import sha256_file

    manifest["tensorrt"] = {"status": "built", **ORIN.as_dict(), "timing_cache": "tensorrt/timing.cache", "engines": {
        "vad/silero": {"backend": "tensorrt", "file": "tensorrt/vad_silero.fp16.plan", "precision": "fp16",
                       "sha256": sha256_file(d / "tensorrt" / "vad_silero.fp16.plan"), "engine_bytes": 4096,
                       "activation_bytes": 3 << 20, "fallbacks": []},
        "mt/pt-en/decoder": {"backend": "onnxruntime", "file": None, "fallbacks": [
            {"from": "fp16", "to": "onnxruntime", "reason": "ParserError: unsupported op"}]}}}
    (d / "manifest.json").write_text(json.dumps(manifest))
    return BuiltPack.load(d)


def test_tensorrt_engines_are_read_from_what_the_build_writes(trt_pack):
    ok = {c.name: c for c in check_tensorrt_engines(trt_pack, Gpu(True), ORIN)}
    assert ok["pack tensorrt"].status == "ok" and "1 of 2 models built for TensorRT 10.3.0.30" in ok["pack tensorrt"].message
    assert ok["tensorrt mt/pt-en/decoder"].status == "warn" and "ParserError" in ok["tensorrt mt/pt-en/decoder"].message
    other = TrtEnvironment("10.3.0.31", "Orin (nvgpu)", "8.7", 15000)
    bad = check_tensorrt_engines(trt_pack, Gpu(True), other)[0]
    assert bad.status == "fail" and "10.3.0.31" in bad.message and "--pack tiny --force" in bad.message
    assert check_tensorrt_engines(trt_pack, Gpu(False), None)[0].status == "info"
    (trt_pack.dir / "tensorrt" / "vad_silero.fp16.plan").write_bytes(b"y" * 4096)
    files = {c.name: c for c in check_tensorrt_engines(trt_pack, Gpu(True), ORIN)}["pack tensorrt files"]
    assert files.status == "fail" and "vad_silero.fp16.plan" in files.message


def test_auto_backend_line_says_which_and_why(tiny_pack):
    check = check_auto_backend(tiny_pack)
    assert check.message.startswith("--backend auto runs on ")
    if tiny_pack.manifest["tensorrt"]["status"] != "built":
        assert "runs on cpu" in check.message and "no TensorRT engines" in check.message


def test_memory_budget_for_an_orin_nano(trt_pack):
    checks = {c.name: c for c in check_memory(trt_pack, measure=True)}
    assert "TensorRT plans 0 MB (1 models)" in checks["memory engines"].message
    assert "TensorRT recorded 1 of" in checks["memory activations"].message
    host = checks["memory host"].message
    assert float(host.split("+")[1].split(" MB")[0]) > 20  # the tiny pack's models really loaded
    for backend in ("cpu", "tensorrt"):
        verdict = checks[f"memory 8 GB Orin Nano ({backend})"]
        assert verdict.status in ("ok", "warn") and "of 8192 MB" in verdict.message


def test_check_status_is_validated():
    with pytest.raises(ValueError, match="status"):
        Check("x", "bad", "m")
