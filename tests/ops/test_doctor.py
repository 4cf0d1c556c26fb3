"""`edge-rt doctor` on this machine: no GPU is a finding, not a failure; a missing audio device blocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from edge_rt.config import Config
from edge_rt.ops.doctor import Check, Gpu, _stage_tensorrt, check_pack, probe_gpu
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


def test_tensorrt_engines_must_match_the_device():
    entry = {"tensorrt": {"version": "10.3.0", "compute_capability": "8.7"}}
    ok = _stage_tensorrt("asr", entry, Gpu(True, compute_capability="8.7"), "10.3.1", "rebuild")
    assert [c.status for c in ok] == ["ok"]
    bad = _stage_tensorrt("asr", entry, Gpu(True, compute_capability="7.2"), "8.5.2", "rebuild")
    assert bad[0].status == "fail" and "8.5.2" in bad[0].message and "7.2" in bad[0].message
    cpu = _stage_tensorrt("asr", entry, Gpu(False), None, "rebuild")
    assert cpu[0].status == "info"


def test_check_status_is_validated():
    with pytest.raises(ValueError, match="status"):
        Check("x", "bad", "m")
