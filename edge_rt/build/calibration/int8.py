"""The INT8 step of the build: calibrate -> quantize -> measure -> gate -> keep or fall back, per model.

For every model of every stage, in order (a stage's later models are gated with the
earlier ones already in their chosen precision):

1. outlier channels found on a few real inputs and split off (:mod:`outliers`);
2. entropy calibration on what the model sees at run time (:mod:`inputs`);
3. each :class:`~edge_rt.build.calibration.quantize.QuantRecipe` of the model in turn: Q/DQ ONNX, then
   speed against FP32 (same input, 2 threads) and the stage's accuracy gate (:mod:`gate`);
   the first recipe that is faster *and* passes is kept (``int8/``, for ONNX Runtime on CPU);
   none -> FP32, with the reason;
4. the TensorRT twin from the same calibration, symmetric (``int8_trt/``, :mod:`trt_variant`).

Nothing is silent: every attempt, its gate figures and speed land in the manifest's
``int8`` section and in ``build_report.md``. Candidates are written under ``.work/`` and
moved into ``int8/`` only once accepted; a stage whose inputs (FP32 files, calibration
data, recipes, this code) are unchanged is not redone. Progress goes to
:mod:`progress` events, messages to ``log``: this module prints nothing.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from pathlib import Path
from typing import Callable

from edge_rt.build.calibration.model_steps import ModelJob, Tools, quantize_model
from edge_rt.build.calibration.plan import PLAN, Int8Options, ModelPlan, plan_for
from edge_rt.build.calibration.progress import ProgressTask
from edge_rt.build.files import model_files, sha256_file

__all__ = ["Int8Options", "ModelPlan", "PLAN", "quantize_pack", "SOURCES"]

WORK = ".work"

# The modules whose code decides the INT8 result (part of every stage key).
# Every module of the calibration package keys the INT8 step (edge_rt/build/calibration/*.py).
SOURCES = tuple(sorted(p.stem for p in Path(__file__).parent.glob("*.py") if p.stem != "__init__"))


def _stage_key(stage: str, entry: dict, out_dir: Path, data_key: str, options: Int8Options) -> str:
    import onnxruntime

    h = hashlib.sha256()
    for model in sorted(entry["models"]):
        h.update(model.encode())
        for f in model_files(out_dir / entry["models"][model]["fp32"]):  # the graph and its weights file
            h.update(sha256_file(f).encode())
    h.update(data_key.encode())
    h.update(repr(options.plan.get(stage)).encode())
    h.update(repr((options.calibration, options.min_speedup, options.threads, options.tensorrt_twins)).encode())
    h.update(onnxruntime.__version__.encode())
    here = Path(__file__).parent
    for name in SOURCES:
        h.update((here / f"{name}.py").read_bytes())
    return h.hexdigest()


def _intact(out_dir: Path, record: dict) -> bool:
    for m in record.get("models", {}).values():
        files = {**m.get("files", {}), **(m.get("trt") or {}).get("files", {})}
        for rel in files:
            p = out_dir / rel
            if not p.is_file() or p.stat().st_size == 0:
                return False
    return True


def quantize_pack(out_dir: Path, stages: dict, old: dict, options: Int8Options = Int8Options(),
                  log: Callable[[str], None] = logging.getLogger(__name__).info) -> dict:
    """Run the INT8 step over ``stages`` (the manifest's stages, FP32 exported); returns the ``int8`` section.

    Adds ``"int8": <path>`` (ONNX Runtime on CPU) and ``"int8_trt": <path>`` (TensorRT) to each
    model's entry in ``stages`` that has them (so ``BuiltPack.model(..., "int8")`` finds it) and
    their hashes to the stage's ``sha256``. ``log`` gets one line per decision.
    """
    from edge_rt.build.calibration.gate import Gates
    from edge_rt.build.calibration.inputs import Drives
    from edge_rt.build.calibration.stage_view import StageView

    import onnxruntime

    out_dir = Path(out_dir)
    if not options.enabled:
        for entry in stages.values():  # a kept stage may still name the INT8 twins of an earlier build
            for m in entry["models"].values():
                m.pop("int8", None)
                m.pop("int8_trt", None)
        return {"enabled": False, "stages": {}}
    onnxruntime.set_default_logger_severity(3)
    view = StageView(out_dir, {s: _fp32_only(e) for s, e in stages.items()}, options.threads)
    work = out_dir / WORK
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    section: dict = {"enabled": True, "stages": {}}
    try:
        data = _calibration_data(view, options, section)
        tools = Tools(view, Drives(view, data), Gates(view, data, options.speech_dir), work, options, log)
        for stage, entry in stages.items():
            key = _stage_key(stage, entry, out_dir, data.key, options)
            prev = old.get("int8", {}).get("stages", {}).get(stage)
            if not options.force and prev and prev.get("key") == key and _intact(out_dir, prev):
                log(f"{stage}: int8 unchanged, kept")
                record = prev
            else:
                t0 = time.perf_counter()
                record = _quantize_stage(stage, entry, tools)
                record["key"] = key
                record["seconds"] = round(time.perf_counter() - t0, 1)
            _apply(entry, record)
            section["stages"][stage] = record
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return section


def _calibration_data(view, options: Int8Options, section: dict):
    """Synthesize (or load) the calibration set; records its summary in ``section["calibration_set"]``."""
    from edge_rt.build.calibration.inputs import CalibrationData
    from edge_rt.build.packs import cache_dir

    tasks: dict[str, ProgressTask] = {}

    def audio_progress(label: str, i: int, n: int) -> None:
        task = tasks.setdefault(label, ProgressTask(f"synthesizing {label}", n))
        task.update(i)

    t0 = time.perf_counter()
    try:
        data = CalibrationData.prepare(view, cache_dir() / "calibration", options.recipe, audio_progress)
    finally:
        for task in tasks.values():
            task.finish()
    section["calibration_set"] = {
        "audio_samples": len(data.audio), "held_out_samples": len(data.held_out), "kinds": data.audio.counts(),
        "key": data.audio.key[:16], "sentences": {k: len(c.calibration) for k, c in data.corpora.items()},
        "held_out_sentences": {k: len(c.held_out) for k, c in data.corpora.items()},
        "prepare_s": round(time.perf_counter() - t0, 1),
    }
    return data


def _fp32_only(entry: dict) -> dict:
    e = dict(entry)
    e["models"] = {m: {"fp32": v["fp32"]} for m, v in entry["models"].items()}
    return e


def _apply(entry: dict, record: dict) -> None:
    """Point the stage's models at their accepted INT8 files and TensorRT twins (or leave them FP32)."""
    for model, m in entry["models"].items():
        m.pop("int8", None)
        m.pop("int8_trt", None)
        r = record["models"].get(model, {})
        if r.get("precision") == "int8":
            m["int8"] = r["int8"]
            entry.setdefault("sha256", {}).update(r.get("files", {}))
        trt = r.get("trt") or {}
        if trt.get("file"):
            m["int8_trt"] = trt["file"]
            entry.setdefault("sha256", {}).update(trt.get("files", {}))


def _quantize_stage(stage: str, entry: dict, tools: Tools) -> dict:
    record: dict = {"models": {}}
    chosen: dict[str, Path] = {}
    for model in entry["models"]:
        plan = plan_for(stage, model, tools.options.plan)
        if plan is None:
            record["models"][model] = {"precision": "fp32", "fallback": "FP32: no INT8 plan for this model",
                                       "trt": {"file": None, "reason": "no TRT twin: no INT8 plan for this model"}}
            continue
        t0 = time.perf_counter()
        job = ModelJob(stage, model, plan, tools.view.fp32(stage, model), dict(chosen))
        r = quantize_model(job, tools)
        r["seconds"] = round(time.perf_counter() - t0, 1)
        record["models"][model] = r
        if r["precision"] == "int8":
            chosen[model] = tools.view.pack_dir / r["int8"]
    return record
