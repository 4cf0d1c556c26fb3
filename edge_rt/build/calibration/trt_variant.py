"""The TensorRT twin of a quantized model: symmetric static Q/DQ from the same calibration.

ONNX Runtime on the CPU and TensorRT want different INT8 graphs (issue 12). The CPU twin
(``int8/<model>.onnx``) may be asymmetric, may quantize Conv outputs, and for the step
decoders and Marian is often *dynamic* (per-call ranges: no Q/DQ at all). TensorRT's explicit
quantization accepts only INT8 Q/DQ with zero point 0, and fuses Q/DQ on the inputs of
MatMul/Gemm/Conv into its INT8 kernels. So every model that has a calibration also gets
``int8_trt/<model>.onnx``:

* the same entropy ranges, made symmetric (``max(|lo|, |hi|)``: no second calibration),
  written to ``int8_trt/<model>.calibration/ranges.json`` (+ TensorRT's cache);
* static Q/DQ on the inputs of the nodes the CPU build chose (the accepted recipe's nodes,
  static or dynamic), or of the first static recipe where the CPU rejected INT8 for speed
  only. Where every CPU recipe failed the accuracy gate there is no TRT twin (FP16 there);
* weights INT8 per output channel, biases float, nothing on the outputs;
* refused unless :func:`~edge_rt.build.calibration.quantize.trt_qdq_problems` finds nothing.

Gate: there is no TensorRT on the build CPU, and ONNX Runtime runs static Q/DQ step decoders
2-9x slower than FP32 (a WER gate there would cost minutes per pack), so the record says
``gate: "on GPU (selftest)"``; the CPU records the cheap tensor comparison against FP32 on the
calibration probes (ONNX Runtime executes the Q/DQ graph), which shows a broken twin.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from edge_rt.build.calibration.calibrate import Calibration
from edge_rt.build.calibration.quantize import QuantRecipe, quantize, select_nodes, trt_qdq_problems
from edge_rt.build.files import install_onnx, remove_onnx, sha256_file

__all__ = ["TRT_DIR", "BACKEND_CPU", "BACKEND_TRT", "GATE_ON_GPU", "TrtJob", "trt_source", "make_trt_variant",
           "remove_trt_variant"]

TRT_DIR = "int8_trt"  # pack folder of the TensorRT twins
BACKEND_CPU = "onnxruntime-cpu"  # what ``int8/<model>.onnx`` is for
BACKEND_TRT = "tensorrt"  # what ``int8_trt/<model>.onnx`` is for
GATE_ON_GPU = "on GPU (selftest)"
FORMAT = "QDQ INT8 symmetric (zero point 0), weights per channel, float biases, Q/DQ on MatMul/Gemm/Conv inputs"


@dataclass(frozen=True)
class TrtJob:
    """One TensorRT twin to make."""

    name: str  # "asr/encoder"
    fp32: Path  # the exported FP32 model
    prepared: Path  # the graph the static recipes quantize (outlier channels split; exact in float)
    calibration: Calibration  # the entropy ranges (asymmetric); made symmetric here
    source: QuantRecipe  # the CPU recipe whose nodes are quantized
    nodes: tuple[str, ...]  # those nodes, each with a calibrated input
    work: Path  # scratch folder (candidates)
    pack_dir: Path


def trt_source(recipes: Sequence[QuantRecipe], attempts: Sequence[Mapping], accepted: QuantRecipe | None
               ) -> tuple[QuantRecipe | None, str]:
    """(recipe whose nodes the TRT twin quantizes, why); (None, reason) when there is to be no twin."""
    if accepted is not None:
        return accepted, f"the nodes of the CPU recipe {accepted.name!r}"
    if any(a.get("result") == "failed the gate" for a in attempts):
        return None, "no TRT twin: INT8 failed the accuracy gate on CPU (TensorRT builds FP16)"
    static = next((r for r in recipes if r.mode == "static"), None)
    if static is None:
        return None, "no TRT twin: no static recipe in the plan"
    return static, f"the nodes of {static.name!r} (the CPU rejected INT8 for speed only)"


def trt_nodes(graph, source: QuantRecipe, calibration: Calibration, keep_float: tuple[str, ...]) -> tuple[str, ...]:
    """The nodes ``source`` selects in ``graph`` whose activation input has a calibrated range."""
    inputs = {n.name: n.input[0] for n in graph.graph.node}
    return tuple(n for n in select_nodes(graph, source, keep_float) if inputs[n] in calibration.ranges)


def trt_recipe(source: QuantRecipe) -> QuantRecipe:
    return QuantRecipe(f"trt-{source.name}", op_types=tuple(t for t in source.op_types if t != "ConvTranspose"),
                       exclude=source.exclude, per_channel=True, quantize_outputs=(), split_outliers=None,
                       symmetric=True)


def remove_trt_variant(pack_dir: Path, fp32_name: str) -> None:
    """Delete a stale twin (and its tables) left by an earlier build."""
    stem = Path(fp32_name).stem
    remove_onnx(pack_dir / TRT_DIR / fp32_name)
    shutil.rmtree(pack_dir / TRT_DIR / f"{stem}.calibration", ignore_errors=True)


def make_trt_variant(job: TrtJob, probes: Sequence[Mapping]) -> dict:
    """Quantize, check, compare and install the TensorRT twin; returns its manifest record (``trt``).

    The record has ``file`` (relative to the pack, or None when refused), ``backend`` ("tensorrt"),
    ``gate`` and, when written, ``calibration_tables``, ``files`` (sha256) and ``tensor_compare``.
    """
    from edge_rt.build.calibration.gate import compare_tensors
    from edge_rt.build.calibration.table import write_tables

    t0 = time.perf_counter()
    recipe = trt_recipe(job.source)
    rec: dict = {"file": None, "backend": BACKEND_TRT, "format": FORMAT, "nodes_from": job.source.name,
                 "quantized_nodes": len(job.nodes), "gate": GATE_ON_GPU}
    remove_trt_variant(job.pack_dir, job.fp32.name)
    if not job.nodes:
        rec["refused"] = ["no node with a calibrated input"]
        return rec
    symmetric = job.calibration.symmetric()
    cand = job.work / f"{job.fp32.stem}.trt.onnx"
    quantize(job.prepared, symmetric, list(job.nodes), recipe, cand)
    import onnx

    problems = trt_qdq_problems(onnx.load(str(cand)))
    if problems:
        rec["refused"] = problems[:5] + ([f"... {len(problems) - 5} more"] if len(problems) > 5 else [])
        return rec
    rec["tensor_compare"] = compare_tensors(job.fp32, cand, list(probes[:3]))
    rel = f"{TRT_DIR}/{job.fp32.name}"
    dst = job.pack_dir / rel
    installed = install_onnx(cand, dst)  # the graph and its weights file (build/files.py)
    tables_rel = f"{TRT_DIR}/{job.fp32.stem}.calibration"
    tables = write_tables(symmetric, job.pack_dir / tables_rel)
    files = {**{f"{TRT_DIR}/{f.name}": sha256_file(f) for f in installed},
             **{f"{tables_rel}/{t.name}": sha256_file(t) for t in tables}}
    rec.update({"file": rel, "calibration_tables": tables_rel, "checked": "trt_qdq_problems: none",
                "files": files, "seconds": round(time.perf_counter() - t0, 1)})
    return rec

