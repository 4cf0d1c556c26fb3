"""Calibration tables written next to a quantized model.

``<model>.calibration/`` holds ONNX Runtime's three tables (``calibration.json``,
``calibration.flatbuffers`` and ``calibration.cache``: the TensorRT execution provider's
``name amax`` table, written by ``write_calibration_table``), our own ``ranges.json``
(ranges + the rule that chose each), and ``trt_entropy.cache``: TensorRT's implicit-
calibration cache (``TRT-<version>-EntropyCalibration2`` then ``name: <scale>`` with the
scale ``amax / 127`` as big-endian float32 hex) for TensorRT <= 10 users who feed it to
``IInt8EntropyCalibrator2.read_calibration_cache``. The folder appears complete or not at all.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path
from typing import Mapping

from edge_rt.build.calibration.calibrate import Calibration, CalibrationError
from edge_rt.build.files import copy_tree

__all__ = ["TRT_CACHE", "trt_version_code", "trt_cache_text", "parse_trt_cache", "write_tables"]

TRT_CACHE = "trt_entropy.cache"
TRT_ALGORITHM = "EntropyCalibration2"
DEFAULT_TRT_VERSION = "10.3.0"  # JetPack 6's TensorRT: the header a cache is stamped with without TensorRT
INT8_MAX = 127.0


def trt_version_code(version: str) -> int:
    """TensorRT's ``NV_TENSORRT_VERSION`` for a version string: 8.6.1 -> 8601, 10.3.0 -> 100300."""
    try:
        parts = [int(p) for p in version.split(".")[:3]]
    except ValueError:
        raise CalibrationError(f"TensorRT version {version!r} is not like '10.3.0'") from None
    major, minor, patch = (parts + [0, 0])[:3]
    return major * 10000 + minor * 100 + patch if major >= 10 else major * 1000 + minor * 100 + patch


def _scale_hex(amax: float) -> str:
    scale = max(float(amax), 1e-12) / INT8_MAX
    return struct.pack(">f", scale).hex()


def trt_cache_text(ranges: Mapping[str, tuple[float, float]], trt_version: str = DEFAULT_TRT_VERSION) -> str:
    """The calibration cache TensorRT's entropy calibrator reads (symmetric: amax = max(|lo|, |hi|))."""
    lines = [f"TRT-{trt_version_code(trt_version)}-{TRT_ALGORITHM}"]
    for name in sorted(ranges):
        lo, hi = ranges[name]
        lines.append(f"{name}: {_scale_hex(max(abs(lo), abs(hi)))}")
    return "\n".join(lines) + "\n"


def parse_trt_cache(text: str) -> tuple[int, dict[str, float]]:
    """(version code, tensor -> scale) of a TensorRT calibration cache; raises naming the bad line."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("TRT-") or not lines[0].endswith(f"-{TRT_ALGORITHM}"):
        raise CalibrationError(
            f"not a TensorRT entropy calibration cache: the first line is {lines[0] if lines else ''!r}, "
            f"expected 'TRT-<version>-{TRT_ALGORITHM}'"
        )
    try:
        version = int(lines[0].split("-")[1])
    except ValueError:
        raise CalibrationError(f"bad TensorRT version in the cache header {lines[0]!r}") from None
    scales = {}
    for i, ln in enumerate(lines[1:], start=2):
        name, sep, value = ln.rpartition(": ")
        try:
            if not sep:
                raise ValueError("no ': '")
            scales[name] = struct.unpack(">f", bytes.fromhex(value.strip()))[0]
        except (ValueError, struct.error) as e:
            raise CalibrationError(f"line {i} of the calibration cache is not 'name: <8 hex digits>': {ln!r} ({e})") from e
    return version, scales


def write_tables(calibration: Calibration, folder: Path, trt_version: str = DEFAULT_TRT_VERSION) -> list[Path]:
    """Write every table into ``folder`` atomically; returns the files (relative order fixed)."""
    from onnxruntime.quantization import write_calibration_table

    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix=".calib_", dir=folder.parent if folder.parent.exists() else None) as tmp:
        t = Path(tmp) / "tables"
        t.mkdir()
        write_calibration_table(calibration.tensors_data().data, dir=str(t))
        (t / "ranges.json").write_text(calibration.to_json() + "\n")
        (t / TRT_CACHE).write_text(trt_cache_text(calibration.ranges, trt_version))
        copy_tree(t, folder)
    return sorted(p for p in folder.iterdir() if p.is_file())


def remove_tables(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
