"""The INT8 step of the build: calibrate -> quantize -> measure -> gate -> keep or fall back, per model.

For every model of every stage, in order (a stage's later models are gated with the
earlier ones already in their chosen precision):

1. outlier channels found on a few real inputs and split off (:mod:`outliers`);
2. entropy calibration on what the model sees at run time (:mod:`calib_inputs`);
3. each :class:`~edge_rt.build.calibration.quantize.QuantRecipe` of the model in turn: Q/DQ ONNX, then
   speed against FP32 (same input, 2 threads) and the stage's accuracy gate (:mod:`gate`);
   the first recipe that is faster *and* passes is kept; none -> FP32, with the reason.

Nothing is silent: every attempt, its gate figures and speed land in the manifest's
``int8`` section and in ``build_report.md``. Candidates are written under ``.work/`` and
moved into ``int8/`` only once accepted; a stage whose inputs (FP32 files, calibration
data, recipes, this code) are unchanged is not redone.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from edge_rt.build.calibration.audio import AudioRecipe
from edge_rt.build.calibration.calibrate import CalibratingEngine, Calibration, CalibrationOptions, Calibrator
from edge_rt.build.files import sha256_file
from edge_rt.build.calibration.quantize import QuantRecipe, check_onnx, quantize, select_nodes, tensors_to_calibrate

__all__ = ["Int8Options", "PLAN", "quantize_pack", "SOURCES"]

WORK = ".work"
STATS_SAMPLES = 12  # real inputs used to find outlier channels


@dataclass(frozen=True)
class ModelPlan:
    pattern: str  # regular expression on the model name within its stage
    recipes: tuple[QuantRecipe, ...]
    max_samples: int  # calibration calls
    num_bins: int = 512  # entropy histogram bins (finer costs O(bins^2) Python time per tensor)


# Why these recipes: see quantize.py and the measurements in build_report.md.
_DYNAMIC = QuantRecipe("dynamic", mode="dynamic", op_types=("MatMul",), per_channel=False, split_outliers=None)
PLAN: dict[str, tuple[ModelPlan, ...]] = {
    "vad": (ModelPlan(".*", (QuantRecipe("full"),), 3000),),
    "asr": (
        # The two input convs stay float: quantizing them (and the mel input) cost Whisper base
        # 1.4 WER points on the real clips; with them float the gate passes (+0.9). 2048 bins:
        # 512 gave coarser thresholds and +1.9 points (measured 2026-11-29).
        ModelPlan("encoder", (QuantRecipe("no-conv", op_types=("MatMul", "Gemm")),
                              QuantRecipe("no-conv-no-fc2", op_types=("MatMul", "Gemm"), exclude=(r"ffn/linear_1",))),
                  64, num_bins=2048),
        # Static Q/DQ is tried (and measured) first; it has run slower than FP32 on the step decoder.
        # Its MatMuls in int8 cost 2.8 WER points (dynamic: 5.1 -> 7.9 %); the tied output projection
        # alone (a Gemm, most of a step's time: 51865 x 512 weights read per token) is tried last.
        ModelPlan("decoder", (QuantRecipe("full", split_outliers=None), _DYNAMIC,
                              QuantRecipe("logits", mode="dynamic", op_types=("Gemm",), split_outliers=None)),
                  96),
    ),
    "mt": (
        ModelPlan(r".*/encoder", (QuantRecipe("full", split_outliers=None), _DYNAMIC), 90),
        ModelPlan(r".*/decoder", (QuantRecipe("full", split_outliers=None), _DYNAMIC), 200),
    ),
    # Piper: flows and the duration predictor are precision-sensitive (WER 6 -> 11 %) and the
    # vocoder's ConvTranspose has no fused int8 kernel here, so only plain Conv parts are tried.
    "tts": (ModelPlan(".*", (
        QuantRecipe("vocoder-convs", op_types=("Conv",), exclude=(r"^/(enc_p|dp|flow)/",), split_outliers=None),
        QuantRecipe("text-encoder", op_types=("Conv", "MatMul"), exclude=(r"^/(dec|dp|flow)/",), split_outliers=None),
    ), 32),),
}

# The modules whose code decides the INT8 result (part of every stage key).
# Every module of the calibration package keys the INT8 step (edge_rt/build/calibration/*.py).
SOURCES = tuple(sorted(p.stem for p in Path(__file__).parent.glob("*.py") if p.stem != "__init__"))


@dataclass(frozen=True)
class Int8Options:
    """How the INT8 step runs."""

    enabled: bool = True
    force: bool = False  # redo every stage even when its key is unchanged
    recipe: AudioRecipe = AudioRecipe()
    calibration: CalibrationOptions = CalibrationOptions()
    min_speedup: float = 1.1  # keep INT8 only if at least this much faster than FP32
    threads: int = 2  # ONNX Runtime threads for the speed figures
    speech_dir: Path | None = None  # real clips for the Whisper gate (default: gate.speech_dir())
    plan: dict = field(default_factory=lambda: PLAN)


def _plan_for(stage: str, model: str, plan: dict) -> ModelPlan | None:
    return next((p for p in plan.get(stage, ()) if re.fullmatch(p.pattern, model)), None)


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


def _stage_key(stage: str, entry: dict, out_dir: Path, data_key: str, options: Int8Options) -> str:
    import onnxruntime

    h = hashlib.sha256()
    for model in sorted(entry["models"]):
        h.update(model.encode())
        h.update(sha256_file(out_dir / entry["models"][model]["fp32"]).encode())
    h.update(data_key.encode())
    h.update(repr(options.plan.get(stage)).encode())
    h.update(repr((options.calibration, options.min_speedup, options.threads)).encode())
    h.update(onnxruntime.__version__.encode())
    here = Path(__file__).parent
    for name in SOURCES:
        h.update((here / f"{name}.py").read_bytes())
    return h.hexdigest()


def _intact(out_dir: Path, record: dict) -> bool:
    for m in record.get("models", {}).values():
        for rel, sha in m.get("files", {}).items():
            p = out_dir / rel
            if not p.is_file() or p.stat().st_size == 0:
                return False
    return True


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
    """Wraps a collector and reports progress."""

    def __init__(self, inner, tick: Callable[[], None]):
        self.inner, self._tick = inner, tick

    @property
    def full(self) -> bool:
        return self.inner.full

    def collect(self, feeds) -> None:
        self.inner.collect(feeds)
        self._tick()


def quantize_pack(out_dir: Path, stages: dict, old: dict, options: Int8Options = Int8Options(),
                  log: Callable[[str], None] = print) -> dict:
    """Run the INT8 step over ``stages`` (the manifest's stages, FP32 exported); returns the ``int8`` section.

    Adds ``"int8": <path>`` to each accepted model's entry in ``stages`` (so
    ``BuiltPack.model(..., "int8")`` finds it) and its hash to the stage's ``sha256``.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from edge_rt.build.calibration.inputs import CalibrationData, Drives
    from edge_rt.build.calibration.gate import Gates
    from edge_rt.build.packs import cache_dir
    from edge_rt.build.calibration.stage_view import StageView

    import onnxruntime

    out_dir = Path(out_dir)
    if not options.enabled:
        for entry in stages.values():  # a kept stage may still name the INT8 twins of an earlier build
            for m in entry["models"].values():
                m.pop("int8", None)
        return {"enabled": False, "stages": {}}
    onnxruntime.set_default_logger_severity(3)
    view = StageView(out_dir, {s: _fp32_only(e) for s, e in stages.items()}, options.threads)
    work = out_dir / WORK
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    console = Console(stderr=True)
    progress = Progress(TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=True)
    section: dict = {"enabled": True, "stages": {}}
    try:
        with progress:
            tasks: dict[str, int] = {}

            def audio_progress(label: str, i: int, n: int) -> None:
                if label not in tasks:
                    tasks[label] = progress.add_task(f"synthesizing {label}", total=n)
                progress.update(tasks[label], completed=i)

            t0 = time.perf_counter()
            data = CalibrationData.prepare(view, cache_dir() / "calibration", options.recipe, audio_progress)
            section["calibration_set"] = {
                "audio_samples": len(data.audio), "held_out_samples": len(data.held_out), "kinds": data.audio.counts(),
                "key": data.audio.key[:16], "sentences": {k: len(c.calibration) for k, c in data.corpora.items()},
                "held_out_sentences": {k: len(c.held_out) for k, c in data.corpora.items()},
                "prepare_s": round(time.perf_counter() - t0, 1),
            }
            drives, gates = Drives(view, data), Gates(view, data, options.speech_dir)
            for stage, entry in stages.items():
                key = _stage_key(stage, entry, out_dir, data.key, options)
                prev = old.get("int8", {}).get("stages", {}).get(stage)
                if not options.force and prev and prev.get("key") == key and _intact(out_dir, prev):
                    log(f"{stage}: int8 unchanged, kept")
                    record = prev
                else:
                    t0 = time.perf_counter()
                    record = _quantize_stage(stage, entry, view, drives, gates, work, options, progress, log)
                    record["key"] = key
                    record["seconds"] = round(time.perf_counter() - t0, 1)
                _apply(stage, entry, record, out_dir)
                section["stages"][stage] = record
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return section


def _fp32_only(entry: dict) -> dict:
    e = dict(entry)
    e["models"] = {m: {"fp32": v["fp32"]} for m, v in entry["models"].items()}
    return e


def _apply(stage: str, entry: dict, record: dict, out_dir: Path) -> None:
    """Point the stage's models at their accepted INT8 files (or leave them FP32)."""
    for model, m in entry["models"].items():
        m.pop("int8", None)
        r = record["models"].get(model, {})
        if r.get("precision") == "int8":
            m["int8"] = r["int8"]
            entry.setdefault("sha256", {}).update(r.get("files", {}))


def _quantize_stage(stage, entry, view, drives, gates, work, options, progress, log) -> dict:
    record: dict = {"models": {}}
    chosen: dict[str, Path] = {}
    for model in entry["models"]:
        plan = _plan_for(stage, model, options.plan)
        if plan is None:
            record["models"][model] = {"precision": "fp32", "fallback": "no INT8 plan for this model"}
            continue
        t0 = time.perf_counter()
        r = _quantize_model(stage, model, plan, view, drives, gates, work, chosen, options, progress, log)
        r["seconds"] = round(time.perf_counter() - t0, 1)
        record["models"][model] = r
        if r["precision"] == "int8":
            chosen[model] = view.pack_dir / r["int8"]
    return record


def _slug(stage: str, model: str) -> str:
    return f"{stage}_{model.replace('/', '_')}"


def _quantize_model(stage, model, plan: ModelPlan, view, drives, gates, work: Path, chosen, options: Int8Options,
                    progress, log) -> dict:
    import onnx

    from edge_rt.build.calibration.table import write_tables
    from edge_rt.build.calibration.calibrate import CalibrationError
    from edge_rt.build.calibration.gate import compare_tensors
    from edge_rt.build.calibration.outliers import ChannelStats, split_outliers, weight_matmuls
    from edge_rt.build.calibration.speed import measure

    fp32 = view.fp32(stage, model)
    name = f"{stage}/{model}"
    check_onnx(fp32, f"FP32 model of {name}")
    rec: dict = {"precision": "fp32", "calibration": None, "attempts": []}
    slug = _slug(stage, model)
    prepared = work / f"{slug}.prepared.onnx"
    graph = onnx.load(str(fp32))

    # 1. outlier channels
    split = {}
    ratio = next((r.split_outliers for r in plan.recipes if r.split_outliers), None)
    if ratio:
        inputs = sorted({n.input[0] for n in weight_matmuls(graph)})
        if inputs:
            stats = ChannelStats(fp32, inputs, STATS_SAMPLES)
            task = progress.add_task(f"{name}: outlier channels", total=STATS_SAMPLES)
            drives.run(stage, model, lambda e: CalibratingEngine(e, _Counter(stats, lambda: progress.advance(task)), 0))
            progress.remove_task(task)
            split = split_outliers(graph, stats.absmax, ratio, plan.recipes[0].max_outliers)
    float_nodes = split.float_nodes if split else ()
    onnx.save(graph, str(prepared))
    rec["outlier_split"] = {k: len(v) for k, v in (split.split.items() if split else [])}

    # 2. entropy calibration of every tensor any static recipe quantizes
    original = onnx.load(str(fp32))
    node_sets = [select_nodes(graph if r.mode == "static" else original, r, float_nodes) for r in plan.recipes]
    static = [(ns, r) for ns, r in zip(node_sets, plan.recipes) if r.mode == "static"]
    tensors = set().union(*(tensors_to_calibrate(graph, ns, r) for ns, r in static)) if static else set()
    if not any(node_sets):
        ops = sorted({n.op_type for n in graph.graph.node})
        rec["fallback"] = (f"FP32: no quantizable node in the main graph (ops: {', '.join(ops)}; "
                           f"the compute of an If/Loop subgraph is not calibrated)")
        log(f"{name}: kept FP32 (nothing to quantize)")
        return rec
    cal_opts = CalibrationOptions(**{**options.calibration.__dict__, "max_samples": plan.max_samples,
                                     "num_bins": plan.num_bins})
    task = progress.add_task(f"{name}: entropy calibration", total=plan.max_samples)
    with (Calibrator(prepared, tensors, cal_opts) if tensors else _ProbeOnly(plan.max_samples)) as cal:
        engine_box: list[CalibratingEngine] = []

        def wrap(e):
            ce = CalibratingEngine(e, _Counter(cal, lambda: progress.advance(task)))
            engine_box.append(ce)
            return ce

        drives.run(stage, model, wrap)
        progress.update(task, description=f"{name}: entropy thresholds")
        calibration: Calibration | None = cal.finish() if tensors else None
    progress.remove_task(task)
    probes = [p for ce in engine_box for p in ce.probes]
    if calibration is not None:
        rec["calibration"] = "entropy"
        rec["calibration_samples"] = calibration.samples
        rec["calibrated_tensors"] = len(calibration.ranges)
        rec["one_sided_tensors"] = sum(1 for v in calibration.rules.values() if v != "entropy")
    if not probes:
        raise CalibrationError(f"{name}: the calibration drive recorded no input")

    # 3. recipes, in order
    accepted = None
    for recipe, nodes in zip(plan.recipes, node_sets):
        attempt: dict = {"recipe": recipe.name, "mode": recipe.mode, "quantized_nodes": len(nodes),
                         "excluded": list(recipe.exclude)}
        rec["attempts"].append(attempt)
        if not nodes:
            attempt["result"] = "no quantizable node"
            continue
        cand = work / f"{slug}.{recipe.name}.onnx"
        task = progress.add_task(f"{name}: quantize + gate ({recipe.name})", total=None)
        try:
            with _quiet():
                quantize(prepared if recipe.mode == "static" else fp32, calibration, nodes, recipe, cand)
            speeds = [measure(fp32, cand, p, options.threads) for p in probes]
            attempt["speed"] = speeds
            mean = sum(s["speedup"] for s in speeds) / len(speeds)
            attempt["mean_speedup"] = round(mean, 2)
            if mean < options.min_speedup:
                attempt["result"] = f"no speed-up (x{mean:.2f} < x{options.min_speedup})"
                continue
            try:
                g = gates.check(stage, model, {**chosen, model: cand})
            except CalibrationError as e:
                attempt["result"] = f"gate not run: {e}"
                break
            attempt["gate"] = g.as_dict()
            attempt["result"] = "passed" if g.passed else "failed the gate"
            if g.passed:
                accepted = (recipe, cand, attempt)
                break
        finally:
            progress.remove_task(task)
    final = accepted[1] if accepted else (work / f"{slug}.{plan.recipes[-1].name}.onnx")
    if final.is_file():
        rec["tensor_compare"] = compare_tensors(fp32, final, probes[:3])
    if accepted is None:
        shutil.rmtree(view.pack_dir / f"int8/{fp32.stem}.calibration", ignore_errors=True)
        (view.pack_dir / f"int8/{fp32.name}").unlink(missing_ok=True)  # a stale twin from an earlier build
        last = rec["attempts"][-1]["result"] if rec["attempts"] else "no recipe"
        rec["fallback"] = f"FP32: {last}"
        log(f"{name}: kept FP32 ({last})")
        return rec

    recipe, cand, attempt = accepted
    rel = f"int8/{fp32.name}"
    dst = view.pack_dir / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.replace(cand, dst)
    files = {rel: sha256_file(dst)}
    tables_rel = f"int8/{fp32.stem}.calibration"
    if recipe.mode == "static":
        tables = write_tables(calibration, view.pack_dir / tables_rel)
        files.update({f"{tables_rel}/{t.name}": sha256_file(t) for t in tables})
        rec["calibration_tables"] = tables_rel
    else:
        shutil.rmtree(view.pack_dir / tables_rel, ignore_errors=True)
        rec["calibration"] = "none: dynamic (activation ranges computed per call)"
    rec.update({"precision": "int8", "int8": rel, "recipe": recipe.as_dict(), "gate": attempt["gate"],
                "speed": attempt["speed"], "mean_speedup": attempt["mean_speedup"], "files": files})
    g, s = attempt["gate"], attempt["speed"][0]
    log(f"{name}: INT8 ({recipe.name}) {g['metric']} {g['fp32']:.4g} -> {g['int8']:.4g}, mean x{attempt['mean_speedup']} "
        f"({s['input']}: {s['fp32_ms']} -> {s['int8_ms']} ms)")
    return rec
