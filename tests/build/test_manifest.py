"""The build's manifest: its shape, atomic write, and reading the previous build back."""

from __future__ import annotations

import hashlib
import json

from edge_rt.build import manifest
from edge_rt.build.packs import PackSpec
from edge_rt.pack import MANIFEST, BuiltPack


def _record(tmp_path):
    (tmp_path / "fp32").mkdir()
    (tmp_path / "fp32" / "m.onnx").write_bytes(b"model")
    (tmp_path / "assets" / "data").mkdir(parents=True)
    (tmp_path / "assets" / "vocab.spm").write_bytes(b"vocab")
    return {"models": {"m": {"fp32": "fp32/m.onnx"}}, "assets": {"vocab": "assets/vocab.spm", "data": "assets/data"}}


def test_assembled_manifest_round_trips_through_the_runtime_reader(tmp_path):
    spec = PackSpec.load("tiny")
    stages = {"mt": {**_record(tmp_path), "kind": "marian"}}
    record = manifest.assemble(spec, stages, {"enabled": False, "stages": {}}, {"status": "skipped", "reason": "x"})
    assert record["format"] == manifest.FORMAT and record["pack_fingerprint"] == spec.fingerprint()
    assert set(record["wheels"]) == set(spec.wheels) and record["stages"] is stages
    path = manifest.write(tmp_path, record)
    assert path == tmp_path / MANIFEST and not list(tmp_path.glob(".*.part"))
    pack = BuiltPack.load(tmp_path)
    assert pack.name == "tiny" and pack.stage("mt")["kind"] == "marian"
    assert manifest.read_previous(tmp_path) == json.loads(path.read_text())


def test_no_previous_manifest_is_an_empty_one(tmp_path):
    assert manifest.read_previous(tmp_path) == {}


def test_an_unreadable_previous_manifest_is_reported_and_ignored(tmp_path):
    (tmp_path / MANIFEST).write_text('{"pack": "tiny", "stages": {')  # cut short
    said: list[str] = []
    assert manifest.read_previous(tmp_path, log=said.append) == {}
    assert len(said) == 1 and "unreadable" in said[0] and "rebuilding every stage" in said[0]


def test_a_manifest_of_another_format_is_not_reused(tmp_path):
    (tmp_path / MANIFEST).write_text(json.dumps({"format": manifest.FORMAT + 1, "stages": {"vad": {}}}))
    said: list[str] = []
    assert manifest.read_previous(tmp_path, log=said.append) == {}
    assert f"not format {manifest.FORMAT}" in said[0]


def test_previous_stage():
    old = {"stages": {"vad": {"kind": "silero"}, "asr": "junk"}}
    assert manifest.previous_stage(old, "vad") == {"kind": "silero"}
    assert manifest.previous_stage(old, "asr") is None and manifest.previous_stage({}, "mt") is None


def test_stage_files_are_hashed_and_folders_skipped(tmp_path):
    record = _record(tmp_path)
    assert manifest.stage_files(record) == ["fp32/m.onnx", "assets/vocab.spm", "assets/data"]
    hashes = manifest.hash_stage_files(tmp_path, record)
    assert set(hashes) == {"fp32/m.onnx", "assets/vocab.spm"}
    assert hashes["fp32/m.onnx"] == hashlib.sha256(b"model").hexdigest()


def test_intact_needs_every_file_and_no_emptied_one(tmp_path):
    record = _record(tmp_path)
    record["sha256"] = manifest.hash_stage_files(tmp_path, record)
    assert manifest.intact(tmp_path, record)
    (tmp_path / "fp32" / "m.onnx").write_bytes(b"")  # an interrupted copy left it empty
    assert not manifest.intact(tmp_path, record)
    (tmp_path / "fp32" / "m.onnx").unlink()
    assert not manifest.intact(tmp_path, record)


def test_a_models_weights_file_is_hashed_and_needed(tmp_path):
    record = _record(tmp_path)
    (tmp_path / "fp32" / "m.onnx.data").write_bytes(b"weights")  # build/files.py's external data
    assert manifest.stage_files(record, tmp_path)[:2] == ["fp32/m.onnx", "fp32/m.onnx.data"]
    record["sha256"] = manifest.hash_stage_files(tmp_path, record)
    assert record["sha256"]["fp32/m.onnx.data"] == hashlib.sha256(b"weights").hexdigest()
    assert manifest.intact(tmp_path, record)
    (tmp_path / "fp32" / "m.onnx.data").unlink()
    assert not manifest.intact(tmp_path, record)
