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
* each model may fail alone (parser failure, builder returns None, out of memory...): INT8 falls
  back to an FP16 engine, FP16 to ONNX Runtime; every fall-back is recorded with its reason
  (:func:`build_engines` documents the record). The builder is injectable (:class:`BuildRequest`
  -> info dict), so the fall-backs are tested on CPU with a builder that fails for one model;
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

__all__ = ["TensorRtOptions", "TensorRtBuildError", "BuildRequest", "bucket_bindings", "profile_shapes",
           "engine_precision", "attempts", "restamp_calibration_cache", "build_engines", "onnx_inputs",
           "polygraphy_builder"]

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
        # The decoder's ``beams``: one sequence (beam search runs on the host, ONNX Runtime: stages/asr/beam.py).
        return [{"positions": bucket_positions(b), "beams": 1} for b in buckets]
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
    """(precision of the engine, which ONNX to build from): ("int8", "int8_trt") for the symmetric
    Q/DQ twin made for TensorRT (edge_rt/build/calibration/trt_variant.py: zero points 0, which
    explicit quantization requires; the CPU's ``int8`` file is asymmetric or dynamic and is never
    handed to TensorRT), ("int8", "fp32") with implicit calibration, else ("fp16", "fp32")."""
    if ((int8_record or {}).get("trt") or {}).get("file"):
        return "int8", "int8_trt"
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


def attempts(precision: str, source: str) -> list[tuple[str, str]]:
    """The (precision, ONNX source) tried in order before ONNX Runtime: INT8 first falls back to FP16."""
    first = [(precision, source)]
    return first if precision == "fp16" else first + [("fp16", "fp32")]


def restamp_calibration_cache(text: str, tensorrt_version: str) -> str:
    """A TensorRT calibration cache with its header stamped for the TensorRT that reads it.

    The INT8 step runs on a CPU without TensorRT and cannot know the device's version; TensorRT
    rejects a cache whose ``TRT-<code>-EntropyCalibration2`` header names another version.
    """
    from edge_rt.build.calibration.table import TRT_ALGORITHM, parse_trt_cache, trt_version_code

    parse_trt_cache(text)  # raises naming the bad line
    lines = text.splitlines()
    lines[0] = f"TRT-{trt_version_code(tensorrt_version)}-{TRT_ALGORITHM}"
    return "\n".join(lines) + "\n"


# -- the build (needs TensorRT and a GPU, or an injected builder) ---------------------------------

@dataclass(frozen=True)
class BuildRequest:
    """One engine to build: what a builder receives."""

    src: Path  # the ONNX model
    dst: Path  # the .plan to write
    profiles: list  # one {input: (min, opt, max)} per profile
    precision: str  # "int8" | "fp16"
    env: TrtEnvironment
    timing_cache: Path  # read if present, written after the build
    workspace_mb: int
    calibration_cache: Path | None  # implicit INT8 (TensorRT <= 10): the restamped cache


Builder = Callable[[BuildRequest], Mapping[str, Any]]  # writes req.dst, returns e.g. {"activation_bytes": n}


def polygraphy_builder(req: BuildRequest) -> dict:
    """Build ``req`` with Polygraphy's loaders and TensorRT; raises on any failure."""
    import tensorrt as trt
    from polygraphy.backend.trt import Calibrator, CreateConfig, EngineFromNetwork, NetworkFromOnnxPath, Profile

    from edge_rt.atomic import atomic_write

    major = int(req.env.tensorrt_version.split(".")[0])
    trt_profiles = []
    for shapes in req.profiles:
        p = Profile()
        for name, (lo, opt, hi) in shapes.items():
            p.add(name, min=lo, opt=opt, max=hi)
        trt_profiles.append(p)
    explicit = req.precision == "int8" and req.calibration_cache is None
    network = NetworkFromOnnxPath(str(req.src), strongly_typed=explicit and major >= 11)
    cache = req.timing_cache
    kwargs: dict[str, Any] = dict(profiles=trt_profiles, load_timing_cache=str(cache) if cache.is_file() else None,
                                  memory_pool_limits={trt.MemoryPoolType.WORKSPACE: req.workspace_mb << 20})
    if not (explicit and major >= 11):
        kwargs["fp16"] = True
        kwargs["int8"] = req.precision == "int8"
    if req.calibration_cache is not None:
        if major >= 11:
            raise TensorRtBuildError("implicit INT8 calibration needs TensorRT <= 10 (TensorRT 11 removed it)")
        kwargs["calibrator"] = Calibrator(data_loader=[], cache=str(req.calibration_cache),
                                          algo=trt.CalibrationAlgoType.ENTROPY_CALIBRATION_2)
    engine = EngineFromNetwork(network, config=CreateConfig(**kwargs), save_timing_cache=str(cache))()
    if engine is None:
        raise TensorRtBuildError("the TensorRT builder returned no engine (see its log above)")
    if hasattr(engine, "get_device_memory_size_for_profile_v2"):
        act = max(engine.get_device_memory_size_for_profile_v2(i) for i in range(engine.num_optimization_profiles))
    else:
        act = getattr(engine, "device_memory_size_v2", engine.device_memory_size)
    plan = engine.serialize()
    if plan is None:
        raise TensorRtBuildError("TensorRT could not serialize the engine")
    atomic_write(req.dst, lambda tmp: tmp.write_bytes(bytes(plan)))
    return {"activation_bytes": int(act)}


def _engine_key(src: Path, profiles: list, precision: str, env: TrtEnvironment, options: TensorRtOptions) -> str:
    from edge_rt.build.files import sha256_file

    h = hashlib.sha256()
    h.update(sha256_file(src).encode())
    h.update(repr((profiles, precision, env.as_dict(), options.workspace_mb)).encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def _build_model(out_dir: Path, stage: str, model: str, entry: dict, files: dict, rec: dict | None,
                 env: TrtEnvironment, options: TensorRtOptions, builder: Builder, prev: dict | None,
                 log: Callable[[str], None]) -> dict:
    """Try each precision in turn; the record says which engine (or ONNX Runtime) serves the model."""
    from edge_rt.build.files import sha256_file

    precision, source = engine_precision(rec, options.implicit_int8)
    fallbacks: list[dict] = []
    for prec, src_kind in attempts(precision, source):
        src = out_dir / files[src_kind]
        rel = f"{ENGINE_DIR}/{stage}_{model.replace('/', '_')}.{prec}.plan"
        t0 = time.perf_counter()
        try:
            inputs = onnx_inputs(src)
            fixed = _fixed_inputs(stage, inputs)
            profiles = [profile_shapes(inputs, b, fixed) for b in bucket_bindings(stage, model, entry)]
            key = _engine_key(src, profiles, prec, env, options)
            if (not options.force and prev and prev.get("key") == key and prev.get("backend") == "tensorrt"
                    and (out_dir / rel).is_file()):
                return prev
            calib = None
            if src_kind == "fp32" and prec == "int8":
                text = (out_dir / rec["calibration_tables"] / "trt_entropy.cache").read_text()
                calib = out_dir / ENGINE_DIR / f"{stage}_{model.replace('/', '_')}.calib.cache"
                calib.write_text(restamp_calibration_cache(text, env.tensorrt_version))
            info = dict(builder(BuildRequest(src, out_dir / rel, profiles, prec, env, out_dir / TIMING_CACHE,
                                             options.workspace_mb, calib)) or {})
            if not (out_dir / rel).is_file():
                raise TensorRtBuildError(f"the builder wrote no engine at {rel}")
        except Exception as e:  # any parser/builder/driver failure: this model falls back, the pack goes on
            nxt = "fp16" if prec == "int8" else "onnxruntime"
            fallbacks.append({"from": prec, "to": nxt, "reason": _reason(e)})
            log(f"TensorRT: {stage}/{model} {prec} failed ({_reason(e)}); falling back to {nxt}")
            continue
        log(f"TensorRT: {stage}/{model} -> {rel} ({prec}, {len(profiles)} profiles)")
        return {
            "backend": "tensorrt", "file": rel, "sha256": sha256_file(out_dir / rel), "precision": prec,
            "source": str(src.relative_to(out_dir)), "profiles": len(profiles),
            "calibration": None if prec != "int8" else (
                "entropy (Q/DQ)" if src_kind == "int8" else "IInt8EntropyCalibrator2"),
            "key": key, "build_s": round(time.perf_counter() - t0, 1), "shapes": json.loads(json.dumps(profiles)),
            "engine_bytes": (out_dir / rel).stat().st_size, "activation_bytes": info.get("activation_bytes"),
            "fallbacks": fallbacks,
        }
    return {"backend": "onnxruntime", "file": None, "precision": None, "source": None, "profiles": 0, "shapes": [],
            "engine_bytes": None, "activation_bytes": None, "build_s": None, "fallbacks": fallbacks}


def build_engines(out_dir: Path, stages: dict, int8: dict, old: dict, options: TensorRtOptions = TensorRtOptions(),
                  log: Callable[[str], None] = print, environment: Callable[[], TrtEnvironment | None] | None = None,
                  builder: Builder | None = None) -> dict:
    """Build every model's engine, or say why not; returns the manifest's ``tensorrt`` section.

    The section (``status`` "built"): ``tensorrt_version`` (exact ``tensorrt.__version__``), ``gpu_name``,
    ``compute_capability``, ``gpu_memory_mb``, ``timing_cache`` (pack-relative), ``timing_cache_reused``,
    ``fallbacks`` (how many models are not served by their first-choice engine) and ``engines``:
    ``{"stage/model": record}`` with ``backend`` ("tensorrt" | "onnxruntime"), ``file`` (the .plan, None
    on ONNX Runtime), ``sha256``, ``precision`` ("int8" | "fp16" | None), ``source`` (the ONNX), ``profiles``
    (count), ``shapes`` (per profile ``{input: [[min], [opt], [max]]}``), ``calibration``, ``key``,
    ``build_s``, ``engine_bytes``, ``activation_bytes`` (TensorRT's device memory for the largest
    profile), ``fallbacks`` ([{"from", "to", "reason"}]). Otherwise ``status`` "skipped" and ``reason``.

    Args:
        environment: where the engines are built (default: detected; injectable for tests).
        builder: builds one :class:`BuildRequest` (default :func:`polygraphy_builder`).
    """
    import importlib.util

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
    cache = out_dir / TIMING_CACHE
    cache.parent.mkdir(parents=True, exist_ok=True)
    section: dict = {"status": "built", **env.as_dict(), "timing_cache": TIMING_CACHE,
                     "timing_cache_reused": cache.is_file(), "engines": {}}
    prev = old.get("tensorrt", {}).get("engines", {}) if old.get("tensorrt", {}).get("status") == "built" else {}
    from edge_rt.backends.factory import CPU_ONLY

    for stage, entry in stages.items():
        if stage in CPU_ONLY:  # the runtime keeps it on ONNX Runtime: an engine would never be loaded
            section.setdefault("cpu_only", {})[stage] = CPU_ONLY[stage]
            log(f"TensorRT: {stage} stays on ONNX Runtime ({CPU_ONLY[stage]})")
            continue
        records = int8.get("stages", {}).get(stage, {}).get("models", {})
        for model, files in entry["models"].items():
            name = f"{stage}/{model}"
            section["engines"][name] = _build_model(out_dir, stage, model, entry, files, records.get(model), env,
                                                    options, builder or polygraphy_builder, prev.get(name), log)
    section["fallbacks"] = sum(1 for e in section["engines"].values() if e.get("fallbacks"))
    return section
