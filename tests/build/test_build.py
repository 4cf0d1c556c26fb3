"""build_pack: a real (tiny, FP32-only) build, then an incremental one that keeps every stage."""

from __future__ import annotations

import json

import pytest

from edge_rt.build.build import BuildOptions, build_pack
from edge_rt.pack import STAGES, BuiltPack


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    said: list[str] = []
    path = build_pack(BuildOptions("tiny", root, int8=False, tensorrt=False), log=said.append)
    return root, path, said


def test_a_build_writes_manifest_and_report(built):
    root, path, said = built
    pack = BuiltPack.load(root / "tiny")
    assert path == root / "tiny" / "manifest.json" and pack.name == "tiny"
    assert all(f"{s}: exporting" in " ".join(said) for s in STAGES)
    for stage in STAGES:
        entry = pack.stage(stage)
        assert entry["build_key"] and entry["sha256"]
        for model in entry["models"].values():
            assert (root / "tiny" / model["fp32"]).is_file()
    assert (root / "tiny" / "build_report.md").read_text().startswith("# Build report: pack `tiny`")


def test_a_second_build_keeps_every_stage(built):
    root, path, _ = built
    before = json.loads(path.read_text())
    said: list[str] = []
    build_pack(BuildOptions("tiny", root, int8=False, tensorrt=False), log=said.append)
    assert [line for line in said if "unchanged, kept" in line] == [f"{s}: unchanged, kept" for s in STAGES]
    assert json.loads(path.read_text())["stages"] == before["stages"]


def test_a_broken_manifest_means_a_full_rebuild(built):
    root, path, _ = built
    path.write_text("{")
    said: list[str] = []
    build_pack(BuildOptions("tiny", root, int8=False, tensorrt=False), log=said.append)
    assert "unreadable" in said[0] and not any("unchanged" in line for line in said)
    assert BuiltPack.load(root / "tiny").stage("asr")["kind"] == "whisper"
