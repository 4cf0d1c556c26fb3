"""The build's side of ``engines/<pack>/manifest.json``: its shape, its atomic write, and the previous
build's records that an incremental build reuses.

The runtime reads the same file through :class:`edge_rt.pack.BuiltPack`. The top level::

    pack, description      the pack declaration's name and description
    format                 FORMAT (the layout of this file)
    edge_rt_version        the edge_rt that built it
    pack_fingerprint       PackSpec.fingerprint() of the declaration
    built_at, built_on     local time; {"machine", "python"}
    wheels                 {wheel name: {"version", "sha256"}}
    stages                 {stage: record}; a record is what the stage's exporter returned plus
                           "build_key", "export_s" and "sha256" ({file: sha256}); every path in it
                           is relative to the pack directory: "models" {model: {precision: path}},
                           "assets" {name: path (a file or a folder)}
    int8                   edge_rt.build.calibration.int8.quantize_pack's section
    tensorrt               edge_rt.build.tensorrt.build_engines's section
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any, Callable

import edge_rt
from edge_rt.build.files import WEIGHTS_SUFFIX, atomic_write, sha256_file
from edge_rt.build.packs import PackSpec
from edge_rt.pack import MANIFEST

__all__ = ["FORMAT", "assemble", "gate_words", "hash_stage_files", "int8_choices", "intact", "named_files",
           "previous_stage", "read_previous",
           "stage_files", "write"]

FORMAT = 1


def read_previous(out_dir: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The manifest the last build of ``out_dir`` wrote, or ``{}`` when there is none.

    An unreadable one (cut short by hand, or from an editor) is reported and treated as none:
    every stage is then rebuilt, which is what ``--force`` would do.
    """
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        log(f"the previous manifest {path} is unreadable ({e}); rebuilding every stage")
        return {}
    if not isinstance(old, dict) or old.get("format") != FORMAT:
        log(f"the previous manifest {path} is not format {FORMAT}; rebuilding every stage")
        return {}
    return old


def previous_stage(old: dict[str, Any], stage: str) -> dict[str, Any] | None:
    """The previous build's record of ``stage`` (None when it had none)."""
    record = old.get("stages", {}).get(stage)
    return record if isinstance(record, dict) else None


def stage_files(record: dict[str, Any], out_dir: Path | None = None) -> list[str]:
    """Pack-relative paths a stage record names: every model file (``parts`` included: graphs derived from
    a model, e.g. Piper's prior and vocoder), then every asset. With ``out_dir``, each model's weights file
    (``<model>.data``, build/files.py) follows its model where it is on disk."""
    rels = []
    for m in (*record.get("models", {}).values(), *record.get("parts", {}).values()):
        for p in m.values():
            rels.append(p)
            if out_dir is not None and (Path(out_dir) / (p + WEIGHTS_SUFFIX)).is_file():
                rels.append(p + WEIGHTS_SUFFIX)
    rels += list(record.get("assets", {}).values())
    return rels


def named_files(record: dict[str, Any]) -> list[str]:
    """Every pack-relative path a stage record names, once: :func:`stage_files`, then the hashed files
    only the hashes name (a model's weights file, build/files.py)."""
    return list(dict.fromkeys([*stage_files(record), *record.get("sha256", {})]))


def hash_stage_files(out_dir: Path, record: dict[str, Any]) -> dict[str, str]:
    """sha256 of every file a stage record names, weights files included (assets that are folders are skipped)."""
    out = {}
    for rel in stage_files(record, out_dir):
        p = Path(out_dir) / rel
        if p.is_file():
            out[rel] = sha256_file(p)
    return out


def intact(out_dir: Path, record: dict[str, Any]) -> bool:
    """Whether every file of a previous stage record is still there (a hashed file must not be empty).

    Sizes, not hashes, are checked: re-hashing hundreds of MB on every build would cost more than
    the check is worth; ``--force`` rebuilds a stage whose files were edited in place. A hashed file
    counts too, so a model whose weights file is gone is not intact.
    """
    hashes = record.get("sha256", {})
    for rel in named_files(record):
        p = Path(out_dir) / rel
        if not p.exists():
            return False
        if rel in hashes and p.is_file() and p.stat().st_size == 0:
            return False
    return True


def assemble(spec: PackSpec, stages: dict[str, Any], int8: dict[str, Any], tensorrt: dict[str, Any]) -> dict[str, Any]:
    """The whole manifest of one build (see the module doc for its keys)."""
    return {
        "pack": spec.name,
        "description": spec.description,
        "format": FORMAT,
        "edge_rt_version": edge_rt.__version__,
        "pack_fingerprint": spec.fingerprint(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "built_on": {"machine": platform.machine(), "python": platform.python_version()},
        "wheels": {w.name: {"version": w.version, "sha256": w.sha256} for w in spec.wheels.values()},
        "stages": stages,
        "int8": int8,
        "tensorrt": tensorrt,
    }


def _int8_models(manifest: dict[str, Any]):
    for stage, rec in manifest.get("int8", {}).get("stages", {}).items():
        for model, m in rec.get("models", {}).items():
            yield f"{stage}/{model}", m


def int8_choices(manifest: dict[str, Any]) -> dict[str, str]:
    """``"stage/model" -> "precision:recipe"`` (recipe ``-`` when none was kept) for every model the INT8
    step decided on: what two builds of a pack from the same inputs must agree on
    (``tests/build/pack_choices.json``, ``tools/record_pack_choices.py``)."""
    return {name: f"{m['precision']}:{(m.get('recipe') or {}).get('name', '-')}" for name, m in _int8_models(manifest)}


def cpu_flags(info: str | None = None) -> list[str]:
    """The CPU's feature flags from /proc/cpuinfo's text ``info`` (None: read it; [] where there is none): x86's
    ``flags`` line, or Arm's ``Features``."""
    if info is None:
        try:
            info = Path("/proc/cpuinfo").read_text()
        except OSError:
            return []
    lines = [ln.split(":", 1)[1] for ln in info.splitlines() if ln.startswith(("flags", "Features"))]
    return lines[0].split() if lines else []


def integer_products(flags: list[str] | None = None) -> str:
    """How this CPU multiplies int8 (``vnni``: dot-product instructions, x86 VNNI or Arm's ``asimddp``; ``avx2``: 16-bit
    pair sums, which ONNX Runtime's u8s8 kernels can saturate; ``other``): INT8 accuracy, so the gates' choices, differ
    between the classes. On the Whisper decoder's tied output projection (51,865 x 512) an AVX2-only EPYC measured
    WER +3.9 points [+1.3, +6.9] for its int8 twin where VNNI machines measured it level (2026-12-05); with uint8
    weights (``QuantRecipe.weights``, that recipe's since) no sum saturates and it measured level there too.
    ``flags``: /proc/cpuinfo's (None: read them, :func:`cpu_flags`)."""
    if flags is None:
        flags = cpu_flags()
    if any(f in flags for f in ("avx512_vnni", "avx_vnni", "asimddp")):
        return "vnni"
    return "avx2" if "avx2" in flags else "other"


def gate_words(manifest: dict[str, Any]) -> dict[str, int]:
    """``"stage/model" -> reference words`` of the largest WER gate each model's recipes ran (models with one)."""
    out = {}
    for name, m in _int8_models(manifest):
        words = [a["gate"]["words"] for a in m.get("attempts", []) if (a.get("gate") or {}).get("words")]
        if words:
            out[name] = max(words)
    return out


def write(out_dir: Path, manifest: dict[str, Any]) -> Path:
    """Write ``<out_dir>/manifest.json`` atomically: the old one stays until the new one is complete."""
    text = json.dumps(manifest, indent=2, sort_keys=False) + "\n"
    return atomic_write(Path(out_dir) / MANIFEST, lambda tmp: tmp.write_text(text))
