"""TensorRT runner: one execution context per shape bucket, device buffers bound once,
every step captured in a CUDA graph that the loop replays.

Imported lazily and only after :func:`edge_rt.backends.compat.current_environment` found a GPU
and TensorRT (the lean runtime segfaults in ``deserialize_cuda_engine`` without a
driver, FACTS.md §3). CUDA calls go through ``cuda-python`` (``cuda.bindings.runtime``),
which imports anywhere and reports a missing driver as an error code.

Lifecycle (Polygraphy's runner habit, without its per-call checks and copies):
``TrtEngine(path)`` deserializes; :meth:`TrtEngine.bind` allocates the device buffers
of one bucket, warms the context up, captures ``execute_async_v3`` into a CUDA graph
and returns a :class:`TrtBoundRun`, whose ``run()`` is: copy inputs host→device,
``cudaGraphLaunch``, copy outputs device→host, synchronize. :meth:`close` frees
everything (also a context manager).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from edge_rt.backends.base import BufferPlan, TensorSpec
from edge_rt.errors import EdgeRtError, PackNotBuiltError


class TrtError(EdgeRtError, RuntimeError):
    """A TensorRT or CUDA call failed."""


def _cudart():
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # type: ignore[no-redef]
        except ImportError as e:
            raise TrtError(f"the TensorRT backend needs cuda-python ({e}): `pip install 'edge-rt[gpu]'`") from e
    return cudart


def _check(result, what: str):
    """cuda-python returns (err, *values); raise on an error, return the values."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise TrtError(f"{what} failed with CUDA error {int(err)} ({err})")
    return values[0] if len(values) == 1 else tuple(values)


def plan_from_shapes(bucket: int, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> BufferPlan:
    """The buffer plan of a bucket, from the host buffers the stage allocated (pure; tested on CPU)."""
    spec = lambda d: tuple(TensorSpec(n, tuple(a.shape), a.dtype.name) for n, a in d.items())  # noqa: E731
    return BufferPlan(bucket, spec(inputs), spec(outputs))


@dataclass
class _Device:
    ptrs: dict[str, int]


class TrtBoundRun:
    """One bucket's context, device buffers and instantiated CUDA graph."""

    def __init__(self, engine: "TrtEngine", plan: BufferPlan, inputs: Mapping[str, np.ndarray],
                 outputs: Mapping[str, np.ndarray]):
        cudart = _cudart()
        self._cudart = cudart
        self._engine = engine
        self.plan = plan
        self._inputs = dict(inputs)
        self._outputs = dict(outputs)
        ctx = engine._engine.create_execution_context()
        if ctx is None:
            raise TrtError(f"{engine.path.name}: could not create an execution context (out of GPU memory?)")
        self._ctx = ctx
        profile = engine.profile_for(plan)
        self._stream = _check(cudart.cudaStreamCreate(), "cudaStreamCreate")
        ctx.set_optimization_profile_async(profile, self._stream)
        self._dev: dict[str, int] = {}
        for t in (*plan.inputs, *plan.outputs):
            self._dev[t.name] = _check(cudart.cudaMalloc(max(t.nbytes, 1)), f"cudaMalloc({t.name})")
            ctx.set_tensor_address(t.name, self._dev[t.name])
        for t in plan.inputs:
            ctx.set_input_shape(t.name, t.shape)
        # Warm up once outside capture (lazy allocations happen here), then capture the step.
        self._upload()
        if not ctx.execute_async_v3(self._stream):
            raise TrtError(f"{engine.path.name}: execute_async_v3 failed during warm-up")
        _check(cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        mode = cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        _check(cudart.cudaStreamBeginCapture(self._stream, mode), "cudaStreamBeginCapture")
        ok = ctx.execute_async_v3(self._stream)
        graph = _check(cudart.cudaStreamEndCapture(self._stream), "cudaStreamEndCapture")
        if not ok:
            raise TrtError(f"{engine.path.name}: execute_async_v3 failed during CUDA graph capture")
        self._graph = graph
        self._exec = _check(cudart.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")

    def _upload(self) -> None:
        H2D = self._cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        for name, arr in self._inputs.items():
            _check(self._cudart.cudaMemcpyAsync(self._dev[name], arr.ctypes.data, arr.nbytes, H2D, self._stream),
                   f"copy {name} to the GPU")

    def run(self) -> None:
        cudart = self._cudart
        self._upload()
        _check(cudart.cudaGraphLaunch(self._exec, self._stream), "cudaGraphLaunch")
        D2H = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name, arr in self._outputs.items():
            _check(cudart.cudaMemcpyAsync(arr.ctypes.data, self._dev[name], arr.nbytes, D2H, self._stream),
                   f"copy {name} from the GPU")
        _check(cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")

    def close(self) -> None:
        cudart = self._cudart
        if getattr(self, "_exec", None) is not None:
            cudart.cudaGraphExecDestroy(self._exec)
            cudart.cudaGraphDestroy(self._graph)
            self._exec = None
        for ptr in self._dev.values():
            cudart.cudaFree(ptr)
        self._dev.clear()
        if getattr(self, "_stream", None) is not None:
            cudart.cudaStreamDestroy(self._stream)
            self._stream = None


class TrtEngine:
    """A serialized TensorRT engine (``.plan``) with one optimisation profile per shape bucket."""

    def __init__(self, path: str | Path, profiles: list[dict[str, tuple[int, ...]]]):
        from edge_rt.backends.compat import current_environment

        path = Path(path)
        if not path.is_file():
            raise PackNotBuiltError(f"TensorRT engine {path} does not exist; build it on this device with "
                                    f"`python tools/build_engines.py --pack <name>`")
        if current_environment() is None:  # never reach deserialize_cuda_engine without a GPU
            raise TrtError("no CUDA GPU with TensorRT here; use the ONNX Runtime backend")
        import tensorrt as trt

        self.path = path
        self.profiles = profiles
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self._engine = self._runtime.deserialize_cuda_engine(path.read_bytes())
        if self._engine is None:
            raise PackNotBuiltError(f"TensorRT could not deserialize {path} (corrupt, or built for another "
                                    f"TensorRT/GPU); rebuild with `python tools/build_engines.py --pack <name> --force`")
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        mode = trt.TensorIOMode.INPUT
        self._inputs = [n for n in names if self._engine.get_tensor_mode(n) == mode]
        self._outputs = [n for n in names if self._engine.get_tensor_mode(n) != mode]
        self._runs: list[TrtBoundRun] = []

    @property
    def input_names(self) -> list[str]:
        return self._inputs

    @property
    def output_names(self) -> list[str]:
        return self._outputs

    def profile_for(self, plan: BufferPlan) -> int:
        return profile_index(self.profiles, {t.name: t.shape for t in plan.inputs})

    def bind(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> TrtBoundRun:
        plan = plan_from_shapes(0, inputs, outputs)
        run = TrtBoundRun(self, plan, inputs, outputs)
        self._runs.append(run)
        return run

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise TrtError("TrtEngine runs only bound, preallocated buffers: call bind() once and run() the result")

    def close(self) -> None:
        for r in self._runs:
            r.close()
        self._runs.clear()

    def __enter__(self) -> "TrtEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def profile_index(profiles: list[dict[str, tuple[int, ...]]], shapes: Mapping[str, tuple[int, ...]]) -> int:
    """Which optimisation profile (one per bucket, in build order) serves these input shapes (pure)."""
    for i, profile in enumerate(profiles):
        if all(tuple(profile.get(name, shape)) == tuple(shape) for name, shape in shapes.items()):
            return i
    raise TrtError(f"no optimisation profile matches input shapes {dict(shapes)}; the engine has "
                   f"{len(profiles)} profiles (rebuild it if the pack's buckets changed)")
