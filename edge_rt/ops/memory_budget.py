"""Will a built pack fit an 8 GB Jetson Orin Nano? (``edge-rt doctor`` prints this.)

On a Jetson the CPU and the GPU share one memory, so everything adds up: TensorRT engine
weights (the ``.plan`` sizes), TensorRT activation memory (one block per engine, sized for its
largest profile: the build records it as ``activation_bytes``; where it did not, it is
estimated from the ONNX model's I/O buffers at its largest bucket, a lower bound), and the host
process. The host RSS of a loaded pack is measured by loading every model on the CPU engines
(ONNX Runtime), which is also what the CPU backend needs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

__all__ = ["ORIN_NANO_MB", "SYSTEM_RESERVE_MB", "ModelMemory", "MemoryBudget", "model_memory", "measure_host_rss",
           "budget"]

MB = 1 << 20
ORIN_NANO_MB = 8192  # Jetson Orin Nano 8 GB: CPU and GPU share it
# JetPack's OS (no desktop), CUDA/TensorRT libraries and context: an assumption, check it with tegrastats
SYSTEM_RESERVE_MB = 1536
_ONNX_BYTES = {1: 4, 2: 1, 3: 1, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 16: 2}  # ONNX elem_type -> bytes


@dataclass(frozen=True)
class ModelMemory:
    name: str  # "stage/model"
    backend: str  # "tensorrt" where the pack has an engine for it, else "onnxruntime"
    file_bytes: int  # the .plan, or the ONNX the CPU backend loads
    onnx_bytes: int
    activation_bytes: int
    activation_recorded: bool  # True: TensorRT's own figure; False: estimated from the ONNX I/O


@dataclass(frozen=True)
class MemoryBudget:
    models: tuple[ModelMemory, ...]
    base_rss_mb: float | None  # the process before any model is loaded
    host_rss_mb: float | None  # added by loading the pack on the CPU engines

    @property
    def engine_mb(self) -> float:
        return sum(m.file_bytes for m in self.models if m.backend == "tensorrt") / MB

    @property
    def onnx_mb(self) -> float:
        return sum(m.onnx_bytes for m in self.models) / MB

    @property
    def activation_mb(self) -> float:
        return sum(m.activation_bytes for m in self.models if m.backend == "tensorrt") / MB

    def total_mb(self, backend: str) -> float | None:
        """What the pack needs on ``backend`` ("cpu" | "tensorrt"), with :data:`SYSTEM_RESERVE_MB`."""
        if self.host_rss_mb is None:
            return None
        if backend == "cpu":
            return self.base_rss_mb + self.host_rss_mb + SYSTEM_RESERVE_MB
        on_cpu = [m for m in self.models if m.backend != "tensorrt"]  # fell back: ONNX Runtime holds them
        share = sum(m.onnx_bytes for m in on_cpu) / max(sum(m.onnx_bytes for m in self.models), 1)
        return self.base_rss_mb + self.host_rss_mb * share + self.engine_mb + self.activation_mb + SYSTEM_RESERVE_MB

    def verdict(self, backend: str, limit_mb: int = ORIN_NANO_MB) -> tuple[str, str]:
        """("ok" | "warn", sentence) against ``limit_mb``."""
        total = self.total_mb(backend)
        if total is None:
            return "info", "host RSS not measured (--quick): no verdict"
        fits = total <= limit_mb
        return ("ok" if fits else "warn",
                f"{backend}: {total:.0f} MB of {limit_mb} MB (incl. {SYSTEM_RESERVE_MB} MB assumed for the OS and "
                f"CUDA): {'fits' if fits else 'does NOT fit; use the tiny pack or fewer MT directions'}")


def _io_estimate(path, bindings: list[dict]) -> int:
    """Bytes of every input and output at the largest profile (named dims from ``bindings``; unbound ones
    count as 1: a lower bound)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    sizes = {}
    for b in bindings:
        for k, v in b.items():
            sizes[k] = max(sizes.get(k, 0), v[2] if isinstance(v, tuple) else v)
    total = 0
    for v in [*model.graph.input, *model.graph.output]:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        dims = [d.dim_value if d.dim_value > 0 else sizes.get(d.dim_param, 1) for d in t.shape.dim]
        total += int(np.prod(dims, dtype=np.int64)) * _ONNX_BYTES.get(t.elem_type, 4)
    return total


def model_memory(pack) -> list[ModelMemory]:
    """Per model: what it costs on the backend the pack serves it with."""
    from edge_rt.build.files import model_files  # how the build stores a model (graph + weights file)
    from edge_rt.build.tensorrt import bucket_bindings  # pure shape rules shared with the build

    section = pack.manifest.get("tensorrt", {})
    engines = section.get("engines", {}) if section.get("status") == "built" else {}
    out = []
    for stage, entry in pack.manifest.get("stages", {}).items():
        for model in entry.get("models", {}):
            onnx_path = pack.model(stage, model, "int8")
            rec = engines.get(f"{stage}/{model}", {})
            trt = rec.get("backend", "tensorrt") == "tensorrt" and bool(rec.get("file"))
            onnx_bytes = sum(f.stat().st_size for f in model_files(onnx_path))  # graph + weights file
            file_bytes = (rec.get("engine_bytes") or (pack.dir / rec["file"]).stat().st_size) if trt else onnx_bytes
            recorded = trt and rec.get("activation_bytes") is not None
            act = (int(rec["activation_bytes"]) if recorded
                   else _io_estimate(onnx_path, bucket_bindings(stage, model, entry)))
            out.append(ModelMemory(f"{stage}/{model}", "tensorrt" if trt else "onnxruntime", int(file_bytes),
                                   int(onnx_bytes), act, recorded))
    return out


def _rss_mb() -> float | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
    except (OSError, ValueError, IndexError):  # not Linux
        return None


def measure_host_rss(pack, threads: int = 1) -> tuple[float | None, float | None]:
    """(process RSS before, RSS added) by loading, on the CPU engines, the models the CPU backend loads (INT8
    where built): not the ``*_device`` twins TensorRT alone runs, and each Marian pair's tied embedding once."""
    from edge_rt.backends.factory import OrtEngines
    from edge_rt.backends.ort import release_freed_heap
    from edge_rt.stages.mt.marian_io import TIED_EMBEDDING

    release_freed_heap()  # every session load trims the heap: trim before too, or what others freed counts as ours
    before = _rss_mb()
    if before is None:
        return None, None
    engines = OrtEngines(pack)
    sessions = [engines.load(stage, model, precision="int8", threads=threads,
                             shared=(TIED_EMBEDDING,) if stage == "mt" else ())
                for stage, entry in pack.manifest.get("stages", {}).items() for model in entry.get("models", {})
                if not model.endswith("_device")]
    after = _rss_mb()
    del sessions, engines
    return before, after - before


def budget(pack, measure: bool = True) -> MemoryBudget:
    base, host = measure_host_rss(pack) if measure else (None, None)
    return MemoryBudget(tuple(model_memory(pack)), base, host)
