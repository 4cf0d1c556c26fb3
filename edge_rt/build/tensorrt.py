"""TensorRT engines from the pack's ONNX models, built with Polygraphy's loaders (when a GPU is present).

Per model::

    EngineFromNetwork(NetworkFromOnnxPath(onnx), config=CreateConfig(profiles=..., int8/fp16=...,
                      load_timing_cache=...), save_timing_cache=...)

* the source is the gated Q/DQ ONNX where the model's INT8 twin is static (explicit
  quantization: works on TensorRT 8.6-11; on 11 the network is parsed strongly typed);
  FP32 ONNX with FP16 enabled where INT8 fell back or is dynamic (TensorRT has no
  ``DynamicQuantizeLinear``);
* one optimisation profile per shape bucket (:func:`bucket_bindings`): Whisper encoder
  windows, decoder cross-attention positions, Marian source buckets (with the shortlist's
  ``vocab_len`` as a range), Piper phoneme buckets; min = opt = max where the bucket is static;
* one timing cache per pack (``tensorrt/timing.cache``), reused across builds;
* on TensorRT <= 10, ``implicit_int8=True`` builds FP32 ONNX with ``IInt8EntropyCalibrator2``
  through Polygraphy's ``Calibrator``, fed by the same calibration inputs and starting from
  the ``trt_entropy.cache`` the INT8 step wrote (TensorRT 11 removed implicit calibration).

Nothing here imports ``tensorrt`` unless :func:`edge_rt.backends.compat.current_environment` found
a GPU first (the lean runtime segfaults without a driver). Without one the build records
why it skipped.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

from edge_rt.backends.compat import TrtEnvironment
from edge_rt.errors import EdgeRtError
from edge_rt.units import bucket_frames, bucket_positions

__all__ = ["TensorRtOptions", "TensorRtBuildError", "bucket_bindings", "profile_shapes", "engine_precision",
           "build_engines", "onnx_inputs"]

ENGINE_DIR = "tensorrt"
TIMING_CACHE = f"{ENGINE_DIR}/timing.cache"
VOCAB_PAD = 64  # Marian vocab_ids lengths are multiples of this (marian_io.VOCAB_PAD)
VOCAB_OPT = 1024  # a typical shortlist (first 50 + 50 per source token), rounded

Dim = Union[int, tuple[int, int, int]]  # a fixed size, or (min, opt, max)


class TensorRtBuildError(EdgeRtError, RuntimeError):
    """A TensorRT engine could not be built from a pack model."""


@dataclass(frozen=True)
class TensorRtOptions:
    enabled: bool = True
    force: bool = False  # rebuild engines even when unchanged
    workspace_mb: int = 2048
    implicit_int8: bool = False  # TensorRT <= 10 only: IInt8EntropyCalibrator2 on FP32 ONNX instead of Q/DQ


# -- pure parts: shapes and precisions ------------------------------------------------------------

def bucket_bindings(stage: str, model: str, entry: Mapping[str, Any]) -> list[dict[str, Dim]]:
    """One dict per optimisation profile: ONNX dim_param -> size (or (min, opt, max)).

    Args:
        stage, model: e.g. ``("asr", "encoder")``, ``("mt", "en-pt/decoder")``.
        entry: the stage's manifest entry (buckets, vocab size).
    """
    if stage == "asr":
        buckets = sorted(int(b) for b in entry["buckets_s"])
        if model == "encoder":
            return [{"frames": bucket_frames(b)} for b in buckets]
        return [{"positions": bucket_positions(b)} for b in buckets]
    if stage == "mt":
        buckets = [int(s) for s in entry["src_buckets"]]
        if model.endswith("/encoder"):
            return [{"src_len": s} for s in buckets]
        vmax = -(-int(entry.get("vocab_size", 32000)) // VOCAB_PAD) * VOCAB_PAD
        return [{"src_len": s, "vocab_len": (VOCAB_PAD, min(VOCAB_OPT, vmax), vmax)} for s in buckets]
    if stage == "tts":
        return [{"batch_size": 1, "phonemes": int(n)} for n in entry["phoneme_buckets"]]
    return [{"batch": 1, "sequence": 576}]  # vad: 64 samples of context + a 512-sample frame


def profile_shapes(inputs: Mapping[str, Sequence[int | str]], bindings: Mapping[str, Dim],
                   fixed: Mapping[str, Sequence[int]] | None = None) -> dict[str, tuple[tuple, tuple, tuple]]:
    """(min, opt, max) shape of every input, substituting named dims from ``bindings``.

    ``inputs`` maps input name -> dims as in the ONNX model (int or dim_param string).
    ``fixed`` gives whole shapes for inputs whose dims the model leaves unnamed or
    data dependent (e.g. Piper's ``input [1, "phonemes"]`` is named, ``scales [3]`` static).
    Raises :class:`TensorRtBuildError` naming an unbound dimension.
    """
    out = {}
    for name, dims in inputs.items():
        if fixed and name in fixed:
            s = tuple(int(d) for d in fixed[name])
            out[name] = (s, s, s)
            continue
        lo, opt, hi = [], [], []
        for d in dims:
            if isinstance(d, int) and d > 0:
                v: Dim = d
            elif isinstance(d, str) and d in bindings:
                v = bindings[d]
            else:
                raise TensorRtBuildError(
                    f"input {name!r} has dimension {d!r} that no bucket binds (bound: {sorted(bindings)}); "
                    f"give it a bucket in edge_rt/build/tensorrt.py bucket_bindings"
                )
            a, b, c = v if isinstance(v, tuple) else (v, v, v)
            lo.append(int(a)), opt.append(int(b)), hi.append(int(c))
        out[name] = (tuple(lo), tuple(opt), tuple(hi))
    return out


def engine_precision(int8_record: Mapping[str, Any] | None, implicit_int8: bool) -> tuple[str, str]:
    """(precision of the engine, which ONNX to build from): ("int8", "int8") for a static Q/DQ twin,
    ("int8", "fp32") with implicit calibration, else ("fp16", "fp32")."""
    static = bool(int8_record) and int8_record.get("precision") == "int8" and \
        int8_record.get("recipe", {}).get("mode") == "static"
    if static:
        return "int8", "int8"
    if implicit_int8 and int8_record and int8_record.get("calibration_tables"):
        return "int8", "fp32"
    return "fp16", "fp32"


def onnx_inputs(path: Path) -> dict[str, list[int | str]]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input if i.name not in inits}


def _fixed_inputs(stage: str, inputs: Mapping[str, Sequence]) -> dict[str, list[int]]:
    """Whole shapes of inputs whose dims the graph leaves unnamed (none in today's packs)."""
    return {name: [] for name, dims in inputs.items() if dims == [] }


# -- the build (needs TensorRT and a GPU) ---------------------------------------------------------

def _engine_key(src: Path, profiles: list, precision: str, env: TrtEnvironment, options: TensorRtOptions) -> str:
    from edge_rt.build.files import sha256_file

    h = hashlib.sha256()
    h.update(sha256_file(src).encode())
    h.update(repr((profiles, precision, env.as_dict(), options.workspace_mb)).encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def _build_one(src: Path, dst: Path, profiles: list[dict], precision: str, env: TrtEnvironment, cache: Path,
               options: TensorRtOptions, calib_cache: Path | None) -> None:
    import tensorrt as trt
    from polygraphy.backend.trt import (Calibrator, CreateConfig, EngineFromNetwork, NetworkFromOnnxPath, Profile,
                                        SaveEngine)

    from edge_rt.atomic import atomic_write

    major = int(env.tensorrt_version.split(".")[0])
    trt_profiles = []
    for shapes in profiles:
        p = Profile()
        for name, (lo, opt, hi) in shapes.items():
            p.add(name, min=lo, opt=opt, max=hi)
        trt_profiles.append(p)
    explicit = precision == "int8" and calib_cache is None
    network = NetworkFromOnnxPath(str(src), strongly_typed=explicit and major >= 11)
    kwargs: dict[str, Any] = dict(profiles=trt_profiles, load_timing_cache=str(cache) if cache.is_file() else None,
                                  memory_pool_limits={trt.MemoryPoolType.WORKSPACE: options.workspace_mb << 20})
    if not (explicit and major >= 11):
        kwargs["fp16"] = True
        kwargs["int8"] = precision == "int8"
    if calib_cache is not None:
        if major >= 11:
            raise TensorRtBuildError("implicit INT8 calibration needs TensorRT <= 10 (TensorRT 11 removed it)")
        kwargs["calibrator"] = Calibrator(data_loader=[], cache=str(calib_cache),
                                          algo=trt.CalibrationAlgoType.ENTROPY_CALIBRATION_2)
    engine = EngineFromNetwork(network, config=CreateConfig(**kwargs), save_timing_cache=str(cache))
    atomic_write(dst, lambda tmp: SaveEngine(engine, path=str(tmp))())


def build_engines(out_dir: Path, stages: dict, int8: dict, old: dict, options: TensorRtOptions = TensorRtOptions(),
                  log: Callable[[str], None] = print, environment: Callable[[], TrtEnvironment | None] | None = None) -> dict:
    """Build every model's engine, or say why not; returns the manifest's ``tensorrt`` section."""
    import importlib.util

    from edge_rt.build.files import sha256_file
    from edge_rt.backends.compat import current_environment

    if not options.enabled:
        return {"status": "skipped", "reason": "disabled (--no-tensorrt)"}
    if environment is None and importlib.util.find_spec("tensorrt") is None:
        reason = "tensorrt is not installed (it comes with JetPack on a Jetson; pip install tensorrt fails without NVIDIA's index)"
        log(f"TensorRT: skipped: {reason}")
        return {"status": "skipped", "reason": reason}
    env = (environment or current_environment)()
    if env is None:
        reason = "no CUDA GPU/driver found (cuda-python saw no device); engines are built on the target device"
        log(f"TensorRT: skipped: {reason}")
        return {"status": "skipped", "reason": reason}
    if options.implicit_int8 and int(env.tensorrt_version.split(".")[0]) >= 11:
        raise TensorRtBuildError("--trt-implicit-int8 needs TensorRT <= 10; TensorRT 11 removed IInt8EntropyCalibrator2")
    out_dir = Path(out_dir)
    section: dict = {"status": "built", **env.as_dict(), "timing_cache": TIMING_CACHE, "engines": {}}
    prev = old.get("tensorrt", {}).get("engines", {}) if old.get("tensorrt", {}).get("status") == "built" else {}
    cache = out_dir / TIMING_CACHE
    cache.parent.mkdir(parents=True, exist_ok=True)
    for stage, entry in stages.items():
        records = int8.get("stages", {}).get(stage, {}).get("models", {})
        for model, files in entry["models"].items():
            rec = records.get(model)
            precision, source = engine_precision(rec, options.implicit_int8)
            src = out_dir / (files.get("int8") if source == "int8" else files["fp32"])
            inputs = onnx_inputs(src)
            fixed = _fixed_inputs(stage, inputs)
            profiles = [profile_shapes(inputs, b, fixed) for b in bucket_bindings(stage, model, entry)]
            rel = f"{ENGINE_DIR}/{stage}_{model.replace('/', '_')}.{precision}.plan"
            key = _engine_key(src, profiles, precision, env, options)
            p = prev.get(f"{stage}/{model}")
            if not options.force and p and p.get("key") == key and (out_dir / rel).is_file():
                section["engines"][f"{stage}/{model}"] = p
                continue
            calib = None
            if source == "fp32" and precision == "int8":
                calib = out_dir / rec["calibration_tables"] / "trt_entropy.cache"
            t0 = time.perf_counter()
            _build_one(src, out_dir / rel, profiles, precision, env, cache, options, calib)
            section["engines"][f"{stage}/{model}"] = {
                "file": rel, "sha256": sha256_file(out_dir / rel), "precision": precision,
                "source": str(src.relative_to(out_dir)), "profiles": len(profiles),
                "calibration": "entropy (Q/DQ)" if source == "int8" else ("IInt8EntropyCalibrator2" if calib else None),
                "key": key, "build_s": round(time.perf_counter() - t0, 1),
                "shapes": json.loads(json.dumps(profiles)),
            }
            log(f"TensorRT: {stage}/{model} -> {rel} ({precision}, {len(profiles)} profiles)")
    return section
