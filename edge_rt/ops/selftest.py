"""``edge-rt selftest``: the one command a Jetson owner runs and sends back.

On a GPU with TensorRT, for the pack's TensorRT engines:

1. every engine and shape bucket against ONNX Runtime on the CPU, on the same synthetic inputs
   (max abs and relative L2 error of every output), with the step time with and without the
   CUDA graph (median of :attr:`SelftestOptions.repeats`);
2. Whisper WER/CER and Marian chrF through TensorRT and through the CPU on the real clips
   (:func:`edge_rt.measure.eval.evaluate`);
3. ``bench`` turn latency on TensorRT against the CPU (:func:`edge_rt.measure.bench.bench`).

Writes ``selftest.json`` and ``selftest.md`` into ``--out``. Without a GPU or TensorRT it returns
``{"skipped": True, "reason": ...}`` and touches nothing (exit status 0). Each part records its
own error instead of stopping the rest: the report is what gets sent back.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

__all__ = ["SelftestOptions", "unavailable_reason", "compare_outputs", "synthetic_inputs", "bucket_shapes",
           "render_markdown", "selftest"]

FLOAT_SCALE = 0.5  # synthetic float inputs: N(0, 0.5^2), in the range activations and features take
TOKEN_HIGH = 128  # synthetic token ids: below every vocabulary size (Piper has 256 phoneme ids)
PIPER_SCALES = (0.667, 1.0, 0.8)  # noise, length, noise_w: Piper's defaults


@dataclass(frozen=True)
class SelftestOptions:
    pack: str = "default"
    out: Path = Path("selftest")  # folder for selftest.json and selftest.md
    repeats: int = 50  # timed steps per engine and bucket (median reported)
    limit: int | None = None  # real clips for WER/chrF and bench (None: all)
    accuracy: bool = True  # WER/chrF through TensorRT and the CPU
    latency: bool = True  # bench turn latency on TensorRT and the CPU
    seed: int = 0


def unavailable_reason() -> str | None:
    """Why the TensorRT self-test cannot run here (None: it can). Looks for a GPU before TensorRT."""
    from edge_rt.backends.compat import current_environment, gpu_info

    if gpu_info() is None:
        return "no GPU: cuda-python found no CUDA device or driver" if importlib.util.find_spec("cuda") else \
            "no GPU: cuda-python is not installed (`pip install 'edge-rt[gpu]'`) and no CUDA device was seen"
    if importlib.util.find_spec("tensorrt") is None:
        return "no TensorRT: a GPU is present but `import tensorrt` fails (JetPack's python3-libnvinfer on a Jetson)"
    if current_environment() is None:
        return "no GPU usable by TensorRT"
    return None


# -- pure parts ----------------------------------------------------------------------------------

def compare_outputs(reference: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> dict[str, dict]:
    """Per output: max abs error and relative L2 error ``|got - ref| / |ref|`` (``|ref|`` 0: the abs L2)."""
    out = {}
    for name, ref in reference.items():
        if name not in got:
            out[name] = {"error": "missing"}
            continue
        a, b = np.asarray(ref, np.float64), np.asarray(got[name], np.float64)
        if a.shape != b.shape:
            out[name] = {"error": f"shape {b.shape}, reference {a.shape}"}
            continue
        diff = float(np.linalg.norm(b - a))
        norm = float(np.linalg.norm(a))
        out[name] = {"max_abs": float(np.max(np.abs(b - a))) if a.size else 0.0,
                     "rel_l2": diff / norm if norm > 0 else diff}
    return out


def bucket_shapes(record: Mapping) -> list[dict[str, tuple[int, ...]]]:
    """One ``{input: opt shape}`` per profile, from the build's record (``shapes``: ``[[min], [opt], [max]]``)."""
    return [{name: tuple(int(d) for d in rng[1]) for name, rng in profile.items()} for profile in record["shapes"]]


def synthetic_inputs(shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, np.dtype], seed: int = 0) -> dict:
    """Inputs a model accepts: floats ~N(0, 0.5²), token ids below :data:`TOKEN_HIGH`, positions and
    offsets 0, masks 1, ``sr`` 16000, Marian ``vocab_ids`` 0..n-1, Piper ``input_lengths`` full and ``scales``."""
    from edge_rt.units import SAMPLE_RATE

    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        dt = np.dtype(dtypes[name])
        if name == "sr":
            a = np.full(shape, SAMPLE_RATE, dt)
        elif name == "vocab_ids":
            a = np.arange(int(np.prod(shape)), dtype=dt).reshape(shape)
        elif name == "input_lengths":
            a = np.full(shape, shapes["input"][-1], dt)
        elif name == "scales":
            a = np.array(PIPER_SCALES, dt)
        elif "mask" in name:
            a = np.ones(shape, dt)
        elif name in ("position", "offset"):
            a = np.zeros(shape, dt)
        elif dt.kind in "iu":
            a = rng.integers(0, TOKEN_HIGH, size=shape).astype(dt)
        else:
            a = (rng.standard_normal(shape) * FLOAT_SCALE).astype(dt)
        out[name] = np.array(a, order="C")  # not ascontiguousarray: it makes scalars 1-d
    return out


def _fmt(v, digits: int = 3) -> str:
    if v is None:
        return "–"
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def render_markdown(result: Mapping) -> str:
    """The human-readable report of :func:`selftest`'s result."""
    if result.get("skipped"):
        return f"# edge-rt selftest\n\nskipped: {result['reason']}\n"
    env = result.get("environment", {})
    lines = ["# edge-rt selftest", "",
             f"Pack `{result['pack']}`; TensorRT {env.get('tensorrt_version')} on {env.get('gpu_name')} (compute "
             f"capability {env.get('compute_capability')}, {env.get('gpu_memory_mb')} MB); {result.get('host', '')}.",
             "", "## TensorRT vs ONNX Runtime (CPU), per engine and bucket", "",
             "| engine | bucket | worst output | max abs | rel L2 | step ms (graph) | step ms (no graph) | graph |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for e in result.get("engines", []):
        if "error" in e:
            lines.append(f"| {e['engine']} | {e.get('bucket', '–')} | error: {e['error']} | | | | | |")
            continue
        outs = {k: v for k, v in e["outputs"].items() if "rel_l2" in v}
        worst = max(outs.items(), key=lambda kv: kv[1]["rel_l2"], default=(None, {}))
        lines.append(f"| {e['engine']} | {e['bucket']} | {worst[0]} | {_fmt(worst[1].get('max_abs'))} | "
                     f"{_fmt(worst[1].get('rel_l2'))} | {_fmt(e.get('graph_ms'))} | {_fmt(e.get('plain_ms'))} | "
                     f"{'yes' if e.get('graph') else 'no: ' + str(e.get('graph_error'))} |")
    for title, key in (("Accuracy on the real clips", "accuracy"), ("Turn latency (bench)", "latency")):
        part = result.get(key)
        if part is None:
            continue
        lines += ["", f"## {title}", "", "| | TensorRT | CPU |", "|---|---:|---:|"]
        if "error" in part:
            lines.append(f"| error | {part['error']} | |")
            continue
        for metric in part["tensorrt"]:
            lines.append(f"| {metric} | {_fmt(part['tensorrt'][metric])} | {_fmt(part['cpu'].get(metric))} |")
    return "\n".join(lines) + "\n"


# -- the device run ------------------------------------------------------------------------------

def _median_ms(step: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 3)


def _engine_buckets(pack, name: str, record: Mapping, options: SelftestOptions) -> list[dict]:
    from edge_rt.backends.ort import OrtEngine
    from edge_rt.backends.trt import TrtEngine

    stage, model = name.split("/", 1)
    rows = []
    with TrtEngine.from_pack(pack, stage, model) as trt:
        ort = OrtEngine(pack.dir / record["source"])
        for bucket, shapes in enumerate(bucket_shapes(record)):
            try:
                inputs = synthetic_inputs(shapes, trt.dtypes, options.seed + bucket)
                ref = ort.run(inputs)
                host_in = {k: trt.host_array(v.shape, v.dtype) for k, v in inputs.items()}
                for k, v in inputs.items():
                    host_in[k][...] = v
                host_out = {k: trt.host_array(ref[k].shape, trt.dtypes[k]) for k in trt.output_names}
                run = trt.bind(host_in, host_out)
                run.run()
                row = {"engine": name, "bucket": bucket, "shapes": {k: list(v) for k, v in shapes.items()},
                       "outputs": compare_outputs(ref, host_out), "graph": run.use_graph, "graph_error": run.graph_error}
                if run.use_graph:
                    row["graph_ms"] = _median_ms(run.run, options.repeats)
                    run.use_graph = False
                row["plain_ms"] = _median_ms(run.run, options.repeats)
                rows.append(row)
            except Exception as e:  # one bucket's failure is a finding of the report, not the end of it
                rows.append({"engine": name, "bucket": bucket, "error": f"{type(e).__name__}: {e}"})
    return rows


def _accuracy(options: SelftestOptions) -> dict:
    from edge_rt.measure.eval import EvalOptions, evaluate

    out = {}
    for backend in ("tensorrt", "cpu"):
        r = evaluate(EvalOptions(pack=options.pack, precisions=("int8",), backend=backend, limit=options.limit,
                                 spoken=False))["precisions"]["int8"]
        row = {f"ASR {lang} {v.get('metric', 'wer').upper()} %": v["value"] for lang, v in r["asr"].items()}
        row["MT chrF"] = r["translation"]["chrf"]
        out[backend] = row
    return out


def _latency(options: SelftestOptions) -> dict:
    from edge_rt.measure.bench import BenchOptions, bench

    out = {}
    for backend in ("tensorrt", "cpu"):
        r = bench(BenchOptions(pack=options.pack, backend=backend, limit=options.limit, baseline=False))
        lat = r["turn_latency_ms"]
        out[backend] = {"turn P50 ms": lat.get("p50"), "turn P95 ms": lat.get("p95"),
                        "clips measured": r["clips_measured"], "backend used": r.get("backend")}
    return out


def _guarded(part: Callable[[SelftestOptions], dict], options: SelftestOptions) -> dict:
    try:
        return part(options)
    except Exception as e:  # the report carries the error; the other parts still run
        return {"error": f"{type(e).__name__}: {e}"}


def selftest(options: SelftestOptions, log: Callable[[str], None] = lambda m: None) -> dict:
    """Run everything (see the module doc); returns the result and writes it to ``options.out``."""
    reason = unavailable_reason()
    if reason is not None:
        return {"skipped": True, "reason": reason}
    from edge_rt.backends.compat import current_environment
    from edge_rt.pack import BuiltPack

    pack = BuiltPack.load(options.pack)
    result: dict = {"skipped": False, "pack": pack.name, "environment": current_environment().as_dict(),
                    "host": f"{platform.machine()}, Python {platform.python_version()}", "engines": []}
    section = pack.manifest.get("tensorrt", {})
    engines = section.get("engines", {}) if section.get("status") == "built" else {}
    if not engines:
        result["engines"].append({"engine": "all", "error": f"the pack has no TensorRT engines "
                                  f"({section.get('reason', 'not built')}); build them here first"})
    for name, record in engines.items():
        if record.get("backend", "tensorrt") != "tensorrt":
            result["engines"].append({"engine": name, "error": "fell back to ONNX Runtime at build time"})
            continue
        log(f"selftest: {name}")
        try:
            result["engines"] += _engine_buckets(pack, name, record, options)
        except Exception as e:  # an engine that does not load is a finding too
            result["engines"].append({"engine": name, "error": f"{type(e).__name__}: {e}"})
    if options.accuracy:
        log("selftest: accuracy through TensorRT and the CPU")
        result["accuracy"] = _guarded(_accuracy, options)
    if options.latency:
        log("selftest: bench on TensorRT and the CPU")
        result["latency"] = _guarded(_latency, options)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "selftest.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / "selftest.md").write_text(render_markdown(result))
    result["report"] = str(out / "selftest.md")
    return result
