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


def test_a_pack_takes_over_the_int8_results_of_a_pack_with_the_same_files(built, tiny_pack):
    """The tiny pack built here (FP32 only) from the same wheels as engines/tiny: its INT8 step takes
    over engines/tiny's results stage by stage (same FP32 files, same key) instead of quantizing again,
    as the tiny and default packs share MT in a CI build."""
    from edge_rt.build.calibration.int8 import _stage_key
    from edge_rt.build.calibration.inputs import CalibrationData
    from edge_rt.build.calibration.plan import Int8Options
    from edge_rt.build.calibration.stage_view import StageView
    from edge_rt.build.files import sha256_file
    from edge_rt.build.packs import cache_dir

    root, path, _ = built
    donor = tiny_pack.manifest["int8"]["stages"]
    # The donor's keys are this code's (else the step below would quantize the whole pack: minutes).
    stages = json.loads(path.read_text())["stages"]
    data = CalibrationData.prepare(StageView(tiny_pack.dir, stages, 2), cache_dir() / "calibration")
    stale = [s for s in donor if donor[s]["key"] != _stage_key(s, stages[s], tiny_pack.dir, data.key, Int8Options())]
    assert not stale, f"engines/tiny was built by other calibration code ({stale}): rebuild it (tools/setup.sh)"

    said: list[str] = []
    build_pack(BuildOptions("tiny", root, int8=True, tensorrt=False, int8_donors=(tiny_pack.dir,)), log=said.append)
    for stage in donor:
        assert f"{stage}: INT8 result of pack 'tiny' taken over" in " ".join(said), said
        assert f"{stage}: int8 unchanged, kept" in said, said
    got = json.loads(path.read_text())["int8"]["stages"]
    assert {s: {k: v for k, v in r.items() if k != "borrowed_from"} for s, r in got.items()} == donor
    mine = BuiltPack.load(root / "tiny")
    int8 = mine.model("mt", "en-pt/encoder", "int8")
    assert int8.parent.name == "int8" and sha256_file(int8) == sha256_file(tiny_pack.model("mt", "en-pt/encoder", "int8"))
    assert "the INT8 step of pack `tiny`" in (root / "tiny" / "build_report.md").read_text()


def test_int8_results_are_not_taken_from_a_pack_whose_files_differ(tmp_path, tiny_pack):
    from edge_rt.build.build import _borrow_int8, _drop_unkept

    stages = json.loads((tiny_pack.dir / "manifest.json").read_text())["stages"]
    changed = {s: dict(e) for s, e in stages.items()}
    for s in ("mt", "asr"):  # one byte of an MT and of the ASR export differs
        changed[s]["sha256"] = {**changed[s]["sha256"], next(iter(changed[s]["sha256"])): "0" * 64}
    old, borrowed = _borrow_int8(tmp_path, changed, {}, (tiny_pack.dir,), log=lambda _: None)
    assert "mt" not in borrowed and "asr" not in borrowed
    assert "tts" not in borrowed  # its gate hears the voice through this pack's Whisper, which differs
    assert "vad" in borrowed and old["int8"]["stages"]["vad"]["borrowed_from"] == "tiny"
    # A borrowed record the INT8 step then redid: what was copied for it and is not named goes.
    (tmp_path / "int8").mkdir()
    (tmp_path / "int8" / "x.onnx").write_bytes(b"x")
    _drop_unkept(tmp_path, {"stages": {"mt": {"models": {}}}}, {"mt": ("tiny", ["int8/x.onnx"])}, lambda _: None)
    assert not (tmp_path / "int8" / "x.onnx").exists()
