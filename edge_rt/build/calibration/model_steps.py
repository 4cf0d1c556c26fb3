"""The INT8 steps of one model: prepare -> calibrate -> try recipes -> install -> TensorRT twin.

:func:`quantize_model` runs them for one :class:`ModelJob` with the pack-wide :class:`Tools`
and returns the model's manifest record (see :mod:`edge_rt.build.calibration.int8` for the
whole step). Each step is a small function with one job; progress goes to
:mod:`~edge_rt.build.calibration.progress` events, decisions to ``tools.log``.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from edge_rt.build.calibration.calibrate import CalibratingEngine, Calibration, CalibrationError, Calibrator
from edge_rt.build.calibration.plan import Int8Options, ModelPlan
from edge_rt.build.calibration.progress import ProgressTask
from edge_rt.build.calibration.quantize import QuantizationError, QuantRecipe, check_onnx, quantize, select_nodes, tensors_to_calibrate
from edge_rt.build.calibration.trt_variant import BACKEND_CPU, TrtJob, make_trt_variant, remove_trt_variant, \
    trt_nodes, trt_source
from edge_rt.build.files import install_onnx, remove_onnx, sha256_file

__all__ = ["ModelJob", "Tools", "quantize_model"]

STATS_SAMPLES = 12  # real inputs used to find outlier channels
NOT_ON_CPU = "not tried on CPU (slower than FP32 there: the plan says why); calibrated for the TensorRT twin"


@contextlib.contextmanager
def _quiet():
    """ONNX Runtime's quantizer logs advice through the root logger; keep the build output readable."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


class _ProbeOnly:
    """A collector that only counts: the drive of a model with no static recipe still records probe inputs."""

    def __init__(self, max_samples: int):
        self.samples, self.max_samples = 0, max_samples

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    @property
    def full(self) -> bool:
        return self.samples >= self.max_samples

    def collect(self, feeds) -> None:
        self.samples += 1


class _Counter:
    """Wraps a collector and advances a progress task on every sample."""

    def __init__(self, inner, task: ProgressTask):
        self.inner, self._task = inner, task

    @property
    def full(self) -> bool:
        return self.inner.full

    def collect(self, feeds) -> None:
        self.inner.collect(feeds)
        self._task.advance()


@dataclass(frozen=True)
class Tools:
    """What every model's INT8 steps use: the pack, the calibration drives and gates, a scratch folder."""

    view: Any  # StageView
    drives: Any  # inputs.Drives
    gates: Any  # gate.Gates
    work: Path
    options: Int8Options
    log: Callable[[str], None]


@dataclass(frozen=True)
class ModelJob:
    """One model to quantize."""

    stage: str
    model: str
    plan: ModelPlan
    fp32: Path
    chosen: dict  # model -> INT8 path already accepted in this stage (the gate runs them together)

    @property
    def name(self) -> str:
        return f"{self.stage}/{self.model}"

    @property
    def slug(self) -> str:
        return f"{self.stage}_{self.model.replace('/', '_')}"


@dataclass(frozen=True)
class _Prepared:
    """A model after outlier splitting, with the nodes each recipe would quantize."""

    path: Path  # the prepared graph (``.work/<slug>.prepared.onnx``)
    graph: Any  # its onnx.ModelProto
    float_nodes: tuple[str, ...]  # nodes the outlier split keeps in float
    node_sets: tuple[list[str], ...]  # per recipe of the plan
    tensors: frozenset[str]  # activations the static recipes need ranges for
    outlier_split: dict


def quantize_model(job: ModelJob, tools: Tools) -> dict:
    """Steps 1-4 of the module docstring for one model; returns its manifest record."""
    check_onnx(job.fp32, f"FP32 model of {job.name}")
    rec: dict = {"precision": "fp32", "calibration": None, "attempts": []}
    prepared = _prepare(job, tools)
    rec["outlier_split"] = prepared.outlier_split
    if not any(prepared.node_sets):
        ops = sorted({n.op_type for n in prepared.graph.graph.node})
        rec["fallback"] = (f"FP32: no quantizable node in the main graph (ops: {', '.join(ops)}; "
                           f"the compute of an If/Loop subgraph is not calibrated)")
        tools.log(f"{job.name}: kept FP32 (nothing to quantize)")
        if tools.options.tensorrt_twins:
            remove_trt_variant(tools.view.pack_dir, job.fp32.name)
            rec["trt"] = {"file": None, "reason": "no TRT twin: nothing to quantize (TensorRT builds FP16)"}
        return rec
    calibration, probes = _calibrate(job, tools, prepared)
    if calibration is not None:
        rec.update({"calibration": "entropy", "calibration_samples": calibration.samples,
                    "calibrated_tensors": len(calibration.ranges),
                    "one_sided_tensors": sum(1 for v in calibration.rules.values() if v != "entropy")})
    accepted = _try_recipes(job, tools, prepared, calibration, probes, rec["attempts"])
    final = accepted[1] if accepted else (tools.work / f"{job.slug}.{job.plan.recipes[-1].name}.onnx")
    if final.is_file():
        from edge_rt.build.calibration.gate import compare_tensors

        rec["tensor_compare"] = compare_tensors(job.fp32, final, probes[:3])
    if accepted is None:
        _drop_cpu_twin(tools.view.pack_dir, job.fp32)
        last = rec["attempts"][-1]["result"] if rec["attempts"] else "no recipe"
        rec["fallback"] = f"FP32: {last}"
        tools.log(f"{job.name}: kept FP32 ({last})")
    else:
        rec.update(_install(job, tools, calibration, *accepted))
    if tools.options.tensorrt_twins:
        rec["trt"] = _trt_twin(job, tools, prepared, calibration, probes, rec["attempts"],
                               accepted[0] if accepted else None)
    return rec


def _prepare(job: ModelJob, tools: Tools) -> _Prepared:
    """Step 1: split outlier channels (measured on a few real inputs); select each recipe's nodes."""
    import onnx

    from edge_rt.build.calibration.outliers import ChannelStats, split_outliers, weight_matmuls

    graph = onnx.load(str(job.fp32))
    split = None
    ratio = next((r.split_outliers for r in job.plan.recipes if r.split_outliers), None)
    inputs = sorted({n.input[0] for n in weight_matmuls(graph)}) if ratio else []
    if inputs:
        stats = ChannelStats(job.fp32, inputs, STATS_SAMPLES)
        with ProgressTask(f"{job.name}: outlier channels", STATS_SAMPLES) as task:
            tools.drives.run(job.stage, job.model, lambda e: CalibratingEngine(e, _Counter(stats, task), 0))
        split = split_outliers(graph, stats.absmax, ratio, job.plan.recipes[0].max_outliers)
    float_nodes = tuple(split.float_nodes) if split else ()
    path = tools.work / f"{job.slug}.prepared.onnx"
    onnx.save(graph, str(path))
    original = onnx.load(str(job.fp32))
    node_sets = tuple(select_nodes(graph if r.mode == "static" else original, r, float_nodes)
                      for r in job.plan.recipes)
    static = [(ns, r) for ns, r in zip(node_sets, job.plan.recipes) if r.mode == "static"]
    tensors = frozenset().union(*(tensors_to_calibrate(graph, ns, r) for ns, r in static))
    return _Prepared(path, graph, float_nodes, node_sets, tensors,
                     {k: len(v) for k, v in (split.split.items() if split else [])})


def _calibrate(job: ModelJob, tools: Tools, prepared: _Prepared) -> tuple[Calibration | None, list[dict]]:
    """Step 2: drive the stage on the calibration set; entropy ranges (None: no static recipe) and probes."""
    cal_opts = replace(tools.options.calibration, max_samples=job.plan.max_samples, num_bins=job.plan.num_bins)
    engines: list[CalibratingEngine] = []
    with ProgressTask(f"{job.name}: entropy calibration", job.plan.max_samples) as task, \
            (Calibrator(prepared.path, set(prepared.tensors), cal_opts) if prepared.tensors
             else _ProbeOnly(job.plan.max_samples)) as cal:

        def wrap(e):
            engines.append(CalibratingEngine(e, _Counter(cal, task)))
            return engines[-1]

        tools.drives.run(job.stage, job.model, wrap)
        task.update(label=f"{job.name}: entropy thresholds")
        calibration = cal.finish() if prepared.tensors else None
    probes = [p for ce in engines for p in ce.probes]
    if not probes:
        raise CalibrationError(f"{job.name}: the calibration drive recorded no input")
    return calibration, probes


def _try_recipes(job: ModelJob, tools: Tools, prepared: _Prepared, calibration: Calibration | None,
                 probes: list[dict], attempts: list[dict]) -> tuple[QuantRecipe, Path, dict] | None:
    """Step 3: each recipe in turn; the first fast enough *and* gated one: (recipe, candidate file, attempt)."""
    for recipe, nodes in zip(job.plan.recipes, prepared.node_sets):
        attempt: dict = {"recipe": recipe.name, "mode": recipe.mode, "quantized_nodes": len(nodes),
                         "excluded": list(recipe.exclude)}
        attempts.append(attempt)
        if not nodes:
            attempt["result"] = "no quantizable node"
            continue
        if not recipe.try_on_cpu:
            attempt["result"] = NOT_ON_CPU
            continue
        cand = tools.work / f"{job.slug}.{recipe.name}.onnx"
        with ProgressTask(f"{job.name}: quantize + gate ({recipe.name})"):
            with _quiet():
                quantize(prepared.path if recipe.mode == "static" else job.fp32, calibration, nodes, recipe, cand)
            if not _fast_enough(job, tools, cand, probes, attempt):
                continue
            try:
                g = tools.gates.check(job.stage, job.model, {**job.chosen, job.model: cand})
            except CalibrationError as e:
                attempt["result"] = f"gate not run: {e}"
                return None
        attempt["gate"] = g.as_dict()
        attempt["result"] = "passed" if g.passed else ("failed the screen" if g.rule == "screen" else "failed the gate")
        if g.passed:
            return recipe, cand, attempt
    return None


def _fast_enough(job: ModelJob, tools: Tools, cand: Path, probes: list[dict], attempt: dict) -> bool:
    """Speed of ``cand`` against FP32 on the probes (recorded in ``attempt``); at least ``min_speedup``?"""
    from edge_rt.build.calibration.speed import measure

    speeds = [measure(job.fp32, cand, p, tools.options.threads) for p in probes]
    mean = sum(s["speedup"] for s in speeds) / len(speeds)
    attempt.update({"speed": speeds, "mean_speedup": round(mean, 2)})
    if mean < tools.options.min_speedup:
        attempt["result"] = f"slower than FP32 (x{mean:.2f} < x{tools.options.min_speedup})"
        return False
    return True


def _drop_cpu_twin(pack_dir: Path, fp32: Path) -> None:
    shutil.rmtree(pack_dir / f"int8/{fp32.stem}.calibration", ignore_errors=True)
    remove_onnx(pack_dir / f"int8/{fp32.name}")  # a stale twin from an earlier build


def _install(job: ModelJob, tools: Tools, calibration: Calibration | None, recipe: QuantRecipe, cand: Path,
             attempt: dict) -> dict:
    """Move the accepted candidate (and its calibration tables) into ``int8/``; returns the record's fields."""
    from edge_rt.build.calibration.table import write_tables

    pack_dir = tools.view.pack_dir
    rel = f"int8/{job.fp32.name}"
    dst = pack_dir / rel
    files = install_onnx(cand, dst)  # the graph and its weights file (build/files.py)
    out: dict = {"precision": "int8", "int8": rel, "backend": BACKEND_CPU, "recipe": recipe.as_dict(),
                 "gate": attempt["gate"], "speed": attempt["speed"], "mean_speedup": attempt["mean_speedup"],
                 "files": {f"int8/{f.name}": sha256_file(f) for f in files}}
    tables_rel = f"int8/{job.fp32.stem}.calibration"
    if recipe.mode == "static":
        tables = write_tables(calibration, pack_dir / tables_rel)
        out["files"].update({f"{tables_rel}/{t.name}": sha256_file(t) for t in tables})
        out["calibration_tables"] = tables_rel
    else:
        shutil.rmtree(pack_dir / tables_rel, ignore_errors=True)
        out["calibration"] = "none: dynamic (activation ranges computed per call)"
    g, s = attempt["gate"], attempt["speed"][0]
    tools.log(f"{job.name}: INT8 ({recipe.name}) {g['metric']} {g['fp32']:.4g} -> {g['int8']:.4g}, "
              f"mean x{attempt['mean_speedup']} ({s['input']}: {s['fp32_ms']} -> {s['int8_ms']} ms)")
    return out


def _trt_twin(job: ModelJob, tools: Tools, prepared: _Prepared, calibration: Calibration | None, probes: list[dict],
              attempts: list[dict], accepted: QuantRecipe | None) -> dict:
    """Step 4: the TensorRT twin (``int8_trt/``) from the same calibration; returns the ``trt`` record."""
    pack_dir = tools.view.pack_dir
    source, why = trt_source(job.plan.recipes, attempts, accepted)
    if source is None or calibration is None:
        remove_trt_variant(pack_dir, job.fp32.name)
        reason = why if source is None else "no TRT twin: no calibration (no static recipe ran)"
        return {"file": None, "reason": reason}
    nodes = trt_nodes(prepared.graph, source, calibration, prepared.float_nodes)
    try:
        with ProgressTask(f"{job.name}: TensorRT twin"), _quiet():
            rec = make_trt_variant(TrtJob(job.name, job.fp32, prepared.path, calibration, source, nodes, tools.work,
                                          pack_dir), probes)
    except QuantizationError as e:  # one model's twin may fail alone: TensorRT then builds it in FP16
        rec = {"file": None, "refused": [str(e)]}
    rec["why_these_nodes"] = why
    if rec["file"]:
        tools.log(f"{job.name}: TensorRT twin {rec['file']} ({len(nodes)} nodes of {source.name!r}, "
                  f"{rec['seconds']} s; gate {rec['gate']})")
    else:
        tools.log(f"{job.name}: no TensorRT twin written: {rec['refused'][0]}")
    return rec
