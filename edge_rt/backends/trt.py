"""TensorRT runner: one execution context per shape bucket, state kept on the device, every step
replayed from a CUDA graph.

Imported lazily and only after :func:`edge_rt.backends.compat.current_environment` found a GPU
and TensorRT (the lean runtime segfaults in ``deserialize_cuda_engine`` without a driver,
FACTS.md §3). CUDA calls go through ``cuda-python`` (``cuda.bindings.runtime``). The pure parts
(profile choice, dtypes, what is copied per step, memory sizing) live in :mod:`edge_rt.backends.trt_plan`.

Lifecycle (Polygraphy's runner habit, without its per-call checks and copies):
``TrtEngine(path, profiles)`` (or :meth:`TrtEngine.from_pack`) deserializes; the first
:meth:`TrtEngine.bind` creates the engine's stream and ONE device-memory block sized for its
largest profile, which every context of the engine shares (contexts are created
``USER_MANAGED``; they run one at a time on the engine's stream). ``bind`` checks every tensor's
dtype and shape, warms the context up and captures a CUDA graph (two with carried state:
ping-pong buffers); ``run()`` copies only the per-step host inputs, launches the graph and copies
only the host outputs. On integrated GPUs (Jetson) host arrays from :meth:`TrtEngine.host_array`
are mapped pinned memory: the GPU reads and writes them in place, no copy at all.
:meth:`TrtEngine.close` frees everything (also a context manager).
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Mapping

import numpy as np

from edge_rt.backends.base import BufferPlan, TensorSpec
from edge_rt.backends.trt_plan import (DeviceAliases, TrtError, check_binding, numpy_dtype, profile_index, shared_memory_bytes,
                                       slot_copy, step_plan)
from edge_rt.backends.cuda import check as _check
from edge_rt.backends.cuda import cudart as _cudart
from edge_rt.backends.cuda import ok as _ok
from edge_rt.errors import PackNotBuiltError

__all__ = ["TrtEngine", "TrtBoundRun", "TrtError", "profile_index", "plan_from_shapes"]

log = logging.getLogger(__name__)


def plan_from_shapes(bucket: int, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> BufferPlan:
    """The buffer plan of a bucket, from the host buffers the stage allocated (pure; tested on CPU)."""
    spec = lambda d: tuple(TensorSpec(n, tuple(a.shape), a.dtype.name) for n, a in d.items())  # noqa: E731
    return BufferPlan(bucket, spec(inputs), spec(outputs))


class TrtEngine:
    """A serialized TensorRT engine (``.plan``) with one optimisation profile per shape bucket.

    Args:
        path: the ``.plan`` file.
        profiles: the build's record ``tensorrt.engines.<stage/model>.shapes``: one
            ``{input: [[min], [opt], [max]]}`` per profile, in build order.
    """

    def __init__(self, path: str | Path, profiles: list[dict]):
        from edge_rt.backends.compat import current_environment

        path = Path(path)
        if not path.is_file():
            raise PackNotBuiltError(f"TensorRT engine {path} does not exist; build it on this device with "
                                    f"`python tools/build_engines.py --pack <name>`")
        if current_environment() is None:  # never reach deserialize_cuda_engine without a GPU
            raise TrtError("no CUDA GPU with TensorRT here; use the ONNX Runtime backend (--backend cpu)")
        import tensorrt as trt

        self._trt = trt
        self._cudart = _cudart()
        self.path = path
        self.profiles = list(profiles)
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self._engine = self._runtime.deserialize_cuda_engine(path.read_bytes())
        if self._engine is None:
            raise PackNotBuiltError(f"TensorRT could not deserialize {path} (corrupt, or built for another "
                                    f"TensorRT/GPU); rebuild with `python tools/build_engines.py --pack <name> --force`")
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        is_in = lambda n: self._engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT  # noqa: E731
        self._inputs = [n for n in names if is_in(n)]
        self._outputs = [n for n in names if not is_in(n)]
        self.dtypes = {n: numpy_dtype(self._engine.get_tensor_dtype(n)) for n in names}
        props = _check(self._cudart.cudaGetDeviceProperties(0), "cudaGetDeviceProperties")
        self.integrated = bool(props.integrated) and bool(props.canMapHostMemory)  # Jetson: one memory
        self._stream = None
        self._memory = 0  # the shared activation block
        self.memory_bytes = 0
        self._pinned: dict[int, tuple[int, np.ndarray]] = {}  # host ptr -> (nbytes, array)
        self._runs: list[TrtBoundRun] = []
        self.aliases: DeviceAliases | None = None  # set by the factory: device buffers shared across engines

    @classmethod
    def from_pack(cls, pack, stage: str, model: str, here=None) -> "TrtEngine":
        """The engine of ``stage/model`` in a built pack, after the exact TensorRT/GPU check of
        :meth:`edge_rt.pack.BuiltPack.tensorrt_engine`."""
        record = pack.manifest.get("tensorrt", {}).get("engines", {}).get(f"{stage}/{model}", {})
        if record.get("backend", "tensorrt") != "tensorrt" or not record.get("file", "x"):
            why = "; ".join(f"{f['from']}: {f['reason']}" for f in record.get("fallbacks", [])) or "no engine"
            raise PackNotBuiltError(f"{stage}/{model} of pack '{pack.name}' runs on ONNX Runtime: its TensorRT build "
                                    f"fell back ({why}); see build_report.md")
        path = pack.tensorrt_engine(stage, model, here=here)
        return cls(path, record.get("shapes") or [])

    @property
    def input_names(self) -> list[str]:
        return self._inputs

    @property
    def output_names(self) -> list[str]:
        return self._outputs

    # -- resources shared by every context ------------------------------------------------------
    def stream(self):
        if self._stream is None:
            self._stream = _check(self._cudart.cudaStreamCreate(), "cudaStreamCreate")
        return self._stream

    def shared_memory(self) -> tuple[int, int]:
        """(pointer, bytes) of the activation block every context of this engine uses."""
        if not self._memory:
            e = self._engine
            if hasattr(e, "get_device_memory_size_for_profile_v2"):
                need = shared_memory_bytes(e.get_device_memory_size_for_profile_v2(i)
                                           for i in range(e.num_optimization_profiles))
            else:
                need = shared_memory_bytes([getattr(e, "device_memory_size_v2", e.device_memory_size)])
            self.memory_bytes = need
            self._memory = _check(self._cudart.cudaMalloc(max(need, 1)), f"cudaMalloc(activations of {self.path.name})")
        return self._memory, self.memory_bytes

    def host_array(self, shape, dtype) -> np.ndarray:
        """A zeroed, pinned host array (mapped on integrated GPUs: the GPU uses it in place), owned by
        this engine and freed by :meth:`close`. Stages allocate their host buffers with it."""
        dtype = np.dtype(dtype)
        nbytes = max(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 1)
        c = self._cudart
        flags = c.cudaHostAllocMapped if self.integrated else c.cudaHostAllocDefault
        ptr = int(_check(c.cudaHostAlloc(nbytes, flags), f"cudaHostAlloc({nbytes} bytes)"))
        arr = np.frombuffer((ctypes.c_byte * nbytes).from_address(ptr), dtype=dtype,
                            count=int(np.prod(shape, dtype=np.int64))).reshape(shape)
        arr[...] = 0
        self._pinned[ptr] = (nbytes, arr)
        return arr

    def mapped_pointer(self, arr: np.ndarray) -> int | None:
        """The device address of a mapped pinned host array (integrated GPUs), else None."""
        if not self.integrated:
            return None
        ptr = arr.ctypes.data
        for base, (nbytes, _) in self._pinned.items():
            if base <= ptr and ptr + arr.nbytes <= base + nbytes:
                dev = int(_check(self._cudart.cudaHostGetDevicePointer(base, 0), "cudaHostGetDevicePointer"))
                return dev + (ptr - base)
        return None

    # -- binding ---------------------------------------------------------------------------------
    def profile_for(self, plan: BufferPlan) -> int:
        return profile_index(self.profiles, {t.name: t.shape for t in plan.inputs})

    def bind(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray], *,
             device_resident: Mapping[str, str] | None = None, device_inputs: Mapping[str, int] | None = None,
             resident=(), host_outputs=None, graph: bool = True) -> "TrtBoundRun":
        """Bind one bucket. ``inputs``/``outputs`` hold a host buffer for every tensor (its shape and
        dtype are checked against the engine).

        Args:
            device_resident: ``{input: output}`` recurrent state (the Engine protocol's keyword) (VAD ``state <- stateN``, Marian ``state <- state_out``):
                uploaded once, then ping-ponged on the device; :meth:`TrtBoundRun.reset_state` re-uploads it.
            device_inputs: ``{input: device address}`` read from another engine's buffer
                (:meth:`TrtBoundRun.device_address`), e.g. cross K/V from the encoder; never uploaded.
            resident: inputs uploaded once and then updated on the device (Whisper's self-attention
                cache, written slot by slot with :meth:`TrtBoundRun.copy_slot`).
            host_outputs: outputs downloaded each step (default: every output not carried).
            graph: capture a CUDA graph after the warm-up (falls back to plain execution if capture fails).
        """
        carried = dict(device_resident or {})
        device_inputs = dict(device_inputs or {})
        if self.aliases is not None:  # another engine's output bound here as an input: read it on the device
            for n, arr in inputs.items():
                if n not in device_inputs and n not in carried and n not in resident:
                    addr = self.aliases.lookup(arr)
                    if addr is not None:
                        device_inputs[n] = addr
        run = TrtBoundRun(self, inputs, outputs, carry=carried, device_inputs=device_inputs,
                          resident=tuple(resident), host_outputs=host_outputs, graph=graph)
        self._runs.append(run)
        if self.aliases is not None:
            for n, arr in outputs.items():
                if n not in carried.values():
                    self.aliases.add(arr, run, n)
        return run

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise TrtError("TrtEngine runs only bound, preallocated buffers: call bind() once and run() the result")

    def close(self) -> None:
        c = self._cudart
        for r in self._runs:
            r.close()
        self._runs.clear()
        if self._memory:
            c.cudaFree(self._memory)
            self._memory = 0
        for ptr in self._pinned:
            c.cudaFreeHost(ptr)
        self._pinned.clear()
        if self._stream is not None:
            c.cudaStreamDestroy(self._stream)
            self._stream = None

    def __enter__(self) -> "TrtEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TrtBoundRun:
    """One bucket: a context on the engine's shared memory, device buffers, one or two CUDA graphs.

    Attributes:
        graph_error: why no CUDA graph is used (None: the graph replays every step).
        zero_copy: host tensors the GPU reads/writes in place (mapped pinned memory).
    """

    def __init__(self, engine: TrtEngine, inputs, outputs, *, carry, device_inputs, resident, host_outputs, graph):
        trt, c = engine._trt, engine._cudart
        self._c, self._engine = c, engine
        self.name = engine.path.name
        self._inputs, self._outputs = dict(inputs), dict(outputs)
        missing = [n for n in engine.input_names if n not in inputs]
        missing += [n for n in engine.output_names if n not in outputs]
        if missing:
            raise TrtError(f"{self.name}: bind() needs host buffers for {missing}")
        self.plan = step_plan(engine.input_names, engine.output_names, carry, device_inputs, host_outputs, resident)
        self._stream = engine.stream()
        self._dev: dict[str, int] = {}  # buffers this run owns (cudaMalloc)
        self._graphs: list = []
        self.graph_error: str | None = None if graph else "disabled"
        self.use_graph = False
        self.zero_copy: list[str] = []
        self.parity = 0

        ctx = engine._engine.create_execution_context(trt.ExecutionContextAllocationStrategy.USER_MANAGED)
        if ctx is None:
            raise TrtError(f"{self.name}: could not create an execution context (out of GPU memory?)")
        self._ctx = ctx
        ptr, size = engine.shared_memory()
        if hasattr(ctx, "set_device_memory"):
            ctx.set_device_memory(ptr, size)
        else:  # TensorRT 10.0
            ctx.device_memory = ptr
        self.profile = profile_index(engine.profiles, {n: a.shape for n, a in self._inputs.items()})
        try:
            _ok(ctx.set_optimization_profile_async(self.profile, self._stream),
                f"{self.name}: set_optimization_profile_async({self.profile})")
        except RuntimeError as e:
            raise TrtError(f"{self.name}: set_optimization_profile_async({self.profile}) failed: {e}") from e
        for name, arr in self._inputs.items():
            check_binding(self.name, name, arr, engine.dtypes[name], None)
            _ok(ctx.set_input_shape(name, tuple(arr.shape)),
                f"{self.name}: set_input_shape({name!r}, {tuple(arr.shape)})")
        for name, arr in self._outputs.items():
            check_binding(self.name, name, arr, engine.dtypes[name], tuple(ctx.get_tensor_shape(name)))
        self._addresses(device_inputs)
        self.reset_state()
        self._warm_up_and_capture(graph)

    # -- set-up ----------------------------------------------------------------------------------
    def _buffer(self, name: str, arr: np.ndarray, host_side: bool) -> int:
        mapped = self._engine.mapped_pointer(arr) if host_side else None
        if mapped is not None:
            self.zero_copy.append(name)
            return mapped
        self._dev[name] = _check(self._c.cudaMalloc(max(arr.nbytes, 1)), f"cudaMalloc({name})")
        return self._dev[name]

    def _addresses(self, device_inputs: Mapping[str, int]) -> None:
        p = self.plan
        self._addr: dict[str, int] = {n: int(a) for n, a in device_inputs.items()}
        for n in (*p.upload, *p.resident):
            self._addr[n] = self._buffer(n, self._inputs[n], host_side=n in p.upload)
        for n in self._outputs:
            if n not in dict(p.carry).values():
                self._addr[n] = self._buffer(n, self._outputs[n], host_side=n in p.download)
        self._pingpong = {}
        for i, o in p.carry:  # parity 0: i <- a, o -> b; parity 1: swapped
            a = _check(self._c.cudaMalloc(max(self._inputs[i].nbytes, 1)), f"cudaMalloc({i})")
            b = _check(self._c.cudaMalloc(max(self._inputs[i].nbytes, 1)), f"cudaMalloc({o})")
            self._dev[f"{i}#a"], self._dev[f"{i}#b"] = a, b
            self._pingpong[(i, o)] = (a, b)
        for n, a in self._addr.items():
            _ok(self._ctx.set_tensor_address(n, a), f"{self.name}: set_tensor_address({n!r})")
        self._set_parity(0)

    def _set_parity(self, parity: int) -> None:
        for (i, o), (a, b) in self._pingpong.items():
            src, dst = (a, b) if parity == 0 else (b, a)
            _ok(self._ctx.set_tensor_address(i, src), f"{self.name}: set_tensor_address({i!r})")
            _ok(self._ctx.set_tensor_address(o, dst), f"{self.name}: set_tensor_address({o!r})")

    def _warm_up_and_capture(self, graph: bool) -> None:
        c = self._c
        for parity in range(2 if self._pingpong else 1):  # lazy allocations happen outside capture
            self._set_parity(parity)
            if not self._ctx.execute_async_v3(self._stream):
                raise TrtError(f"{self.name}: execute_async_v3 failed during warm-up (profile {self.profile})")
        _check(c.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        if graph:
            try:
                for parity in range(2 if self._pingpong else 1):
                    self._graphs.append(self._capture(parity))
                self.use_graph = True
            except TrtError as e:  # data-dependent shapes, unsupported nodes: run without the graph
                self._destroy_graphs()
                self.graph_error = str(e)
                log.warning("%s (profile %d): CUDA graph capture failed, running without it: %s",
                            self.name, self.profile, e)
        self.reset_state()

    def _capture(self, parity: int):
        c = self._c
        self._set_parity(parity)
        mode = c.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        _check(c.cudaStreamBeginCapture(self._stream, mode), "cudaStreamBeginCapture")
        try:
            ok = self._ctx.execute_async_v3(self._stream)
        except RuntimeError as e:
            c.cudaStreamEndCapture(self._stream)  # leave capture mode before reporting
            raise TrtError(f"execute_async_v3 raised under stream capture: {e}") from e
        g = _check(c.cudaStreamEndCapture(self._stream), "cudaStreamEndCapture")
        if not ok:
            c.cudaGraphDestroy(g)
            raise TrtError("execute_async_v3 failed under stream capture")
        try:
            return g, _check(c.cudaGraphInstantiate(g, 0), "cudaGraphInstantiate")
        except TrtError:
            c.cudaGraphDestroy(g)
            raise

    # -- per step --------------------------------------------------------------------------------
    def reset_state(self) -> None:
        """Upload the resident and carried inputs from their host buffers (a new utterance/sentence)."""
        H2D = self._c.cudaMemcpyKind.cudaMemcpyHostToDevice
        for n in self.plan.resident:
            if n not in self.zero_copy:
                self._copy(self._addr[n], self._inputs[n].ctypes.data, self._inputs[n].nbytes, H2D, n)
        for (i, o), (a, _) in self._pingpong.items():
            self._copy(a, self._inputs[i].ctypes.data, self._inputs[i].nbytes, H2D, i)
        self.parity = 0
        self._set_parity(0)
        _check(self._c.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")

    def _copy(self, dst: int, src: int, nbytes: int, kind, what: str) -> None:
        _check(self._c.cudaMemcpyAsync(dst, src, nbytes, kind, self._stream), f"copy {what}")

    def run(self) -> None:
        c = self._c
        H2D, D2H = c.cudaMemcpyKind.cudaMemcpyHostToDevice, c.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for n in self.plan.upload:
            if n not in self.zero_copy:
                self._copy(self._addr[n], self._inputs[n].ctypes.data, self._inputs[n].nbytes, H2D, n)
        if self.use_graph:
            _check(c.cudaGraphLaunch(self._graphs[self.parity][1], self._stream), "cudaGraphLaunch")
        else:
            self._set_parity(self.parity)
            if not self._ctx.execute_async_v3(self._stream):
                raise TrtError(f"{self.name}: execute_async_v3 failed")
        for n in self.plan.download:
            if n in self.zero_copy:
                continue
            src = self._carried_out(n) or self._addr[n]
            self._copy(self._outputs[n].ctypes.data, src, self._outputs[n].nbytes, D2H, n)
        _check(c.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        if self._pingpong:
            self.parity ^= 1

    def _carried_out(self, name: str) -> int | None:
        for (i, o), (a, b) in self._pingpong.items():
            if o == name:  # the buffer the step just wrote
                return b if self.parity == 0 else a
        return None

    def device_address(self, name: str, offset_bytes: int = 0) -> int:
        """Device address of a (non-carried) tensor, for another engine's ``device_inputs``."""
        if name not in self._addr:
            raise TrtError(f"{self.name}: {name!r} has no fixed device buffer (carried or unknown)")
        return self._addr[name] + int(offset_bytes)

    def copy_slot(self, cache: str, source: str, axis: int, slot: int, source_offset_bytes: int = 0) -> None:
        """Write this step's K or V (output ``source``) into slot ``slot`` of the resident input ``cache``,
        on the device (queued on the engine's stream before the next step)."""
        arr = self._inputs[cache]
        cp = slot_copy(arr.shape, axis, slot, arr.itemsize)
        D2D = self._c.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        _check(self._c.cudaMemcpy2DAsync(self._addr[cache] + cp.dst_offset, cp.dst_pitch,
                                         self._addr[source] + source_offset_bytes, cp.src_pitch, cp.width,
                                         cp.height, D2D, self._stream), f"copy {source} into {cache}[{slot}]")

    def close(self) -> None:
        self._destroy_graphs()
        for ptr in self._dev.values():
            self._c.cudaFree(ptr)
        self._dev.clear()
        self._ctx = None

    def _destroy_graphs(self) -> None:
        for g, exe in self._graphs:
            self._c.cudaGraphExecDestroy(exe)
            self._c.cudaGraphDestroy(g)
        self._graphs.clear()
        self.use_graph = False
