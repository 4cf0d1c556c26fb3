"""The pure parts of the TensorRT runner (tested on CPU, no TensorRT or CUDA needed).

* :func:`profile_index`: which optimisation profile serves a set of input shapes, from the
  (min, opt, max) ranges the build records in ``manifest.json`` (``tensorrt.engines.<model>.shapes``);
* :func:`numpy_dtype` / :func:`check_binding`: TensorRT ``DataType`` -> numpy, and a clear error
  when a host buffer's dtype or shape is not what the engine expects;
* :func:`step_plan`: what crosses the bus per step (uploaded inputs, downloaded outputs) and what
  stays on the device (carried recurrent state, inputs fed by another engine's device buffer);
* :func:`shared_memory_bytes`: the one activation block all contexts of an engine share;
* :func:`slot_copy`: the strided device copy that writes one decoder step's K/V into a cache slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from edge_rt.errors import EdgeRtError

__all__ = ["TrtError", "DeviceAliases", "Range", "normalize_profile", "profile_index", "numpy_dtype", "check_binding", "StepPlan",
           "step_plan", "shared_memory_bytes", "SlotCopy", "slot_copy", "DEVICE_ALIGN"]

DEVICE_ALIGN = 256  # bytes: TensorRT wants device memory aligned to 256 (cudaMalloc gives at least that)

Shape = tuple[int, ...]
Range = tuple[Shape, Shape, Shape]  # (min, opt, max)


class TrtError(EdgeRtError, RuntimeError):
    """A TensorRT or CUDA call failed, or a binding does not fit the engine."""


# -- profiles ------------------------------------------------------------------------------------

def _as_range(name: str, spec) -> Range:
    """A recorded profile entry -> (min, opt, max): ``[[min], [opt], [max]]`` (the build's JSON) or a flat shape."""
    spec = list(spec)
    if spec and all(isinstance(d, (int, np.integer)) for d in spec):
        s = tuple(int(d) for d in spec)
        return s, s, s
    if spec == []:  # a scalar input, e.g. Silero's ``sr``
        return (), (), ()
    if len(spec) == 3 and all(isinstance(p, (list, tuple)) for p in spec):
        lo, opt, hi = (tuple(int(d) for d in p) for p in spec)
        if not (len(lo) == len(opt) == len(hi)):
            raise TrtError(f"profile of {name!r} has ranks {len(lo)}/{len(opt)}/{len(hi)}; rebuild the engine")
        return lo, opt, hi
    raise TrtError(f"profile of {name!r} is neither a shape nor [min, opt, max]: {spec!r}")


def normalize_profile(profile: Mapping[str, object]) -> dict[str, Range]:
    return {name: _as_range(name, spec) for name, spec in profile.items()}


def _fits(rng: Range, shape: Shape) -> bool:
    lo, _, hi = rng
    return len(shape) == len(lo) and all(a <= d <= b for a, d, b in zip(lo, shape, hi))


def _slack(rng: Range, shape: Shape) -> int:
    """How much larger than ``shape`` the profile's max is, in elements (0: an exact static bucket)."""
    return int(np.prod(rng[2], dtype=np.int64)) - int(np.prod(shape, dtype=np.int64))


def profile_index(profiles: Sequence[Mapping[str, object]], shapes: Mapping[str, Sequence[int]]) -> int:
    """The optimisation profile that serves these input shapes.

    A profile matches when every given input is in it and every dimension lies in [min, max];
    of several matches the tightest (least total slack between max and the shape) wins, then the
    first. ``profiles`` are as the build records them (``{input: [[min], [opt], [max]]}``) or flat shapes.
    Raises :class:`TrtError` naming the shapes and the ranges when none matches.
    """
    wanted = {n: tuple(int(d) for d in s) for n, s in shapes.items()}
    best, best_slack = None, None
    for i, profile in enumerate(profiles):
        ranges = normalize_profile(profile)
        if not all(n in ranges and _fits(ranges[n], s) for n, s in wanted.items()):
            continue
        slack = sum(_slack(ranges[n], s) for n, s in wanted.items())
        if best is None or slack < best_slack:
            best, best_slack = i, slack
    if best is None:
        have = "; ".join(f"#{i}: " + ", ".join(f"{n} {r[0]}..{r[2]}" for n, r in normalize_profile(p).items())
                         for i, p in enumerate(profiles))
        raise TrtError(f"no optimisation profile matches input shapes {wanted}; the engine has {len(profiles)} "
                       f"profile(s) ({have or 'none'}): rebuild it if the pack's buckets changed "
                       f"(`python tools/build_engines.py --pack NAME --force`)")
    return best


# -- dtypes and bindings -------------------------------------------------------------------------

_NUMPY_OF = {"FLOAT": "float32", "HALF": "float16", "INT8": "int8", "INT32": "int32", "INT64": "int64",
             "BOOL": "bool", "UINT8": "uint8", "BF16": None, "FP8": None, "INT4": None, "FP4": None}


def numpy_dtype(trt_dtype) -> np.dtype:
    """numpy dtype of a ``tensorrt.DataType`` (or its name, e.g. ``"FLOAT"``/``"DataType.HALF"``)."""
    name = getattr(trt_dtype, "name", None) or str(trt_dtype).rsplit(".", 1)[-1]
    name = name.upper()
    if name not in _NUMPY_OF:
        raise TrtError(f"unknown TensorRT data type {trt_dtype!r}")
    if _NUMPY_OF[name] is None:
        raise TrtError(f"TensorRT data type {name} has no numpy equivalent; an engine's I/O must be "
                       f"float32/float16/int8/int32/int64/bool/uint8 (rebuild with I/O in one of those)")
    return np.dtype(_NUMPY_OF[name])


def check_binding(engine: str, name: str, arr: np.ndarray, dtype: np.dtype, shape: Sequence[int] | None) -> None:
    """Raise :class:`TrtError` when a host buffer cannot back tensor ``name`` (dtype, shape, layout)."""
    if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
        raise TrtError(f"{engine}: buffer {name!r} must be a C-contiguous numpy array")
    if arr.dtype != dtype:
        raise TrtError(f"{engine}: tensor {name!r} is {np.dtype(dtype).name} in the engine, the buffer is "
                       f"{arr.dtype.name}; allocate it as {np.dtype(dtype).name}")
    if shape is not None and any(int(d) < 0 for d in shape):
        raise TrtError(f"{engine}: output {name!r} has a data-dependent shape {tuple(int(d) for d in shape)}: it "
                       f"cannot be bound to a static buffer; export the model with a fixed output size per bucket "
                       f"(or run it on ONNX Runtime)")
    if shape is not None and tuple(arr.shape) != tuple(int(d) for d in shape):
        raise TrtError(f"{engine}: tensor {name!r} has shape {tuple(int(d) for d in shape)} for these inputs, the "
                       f"buffer is {tuple(arr.shape)}; allocate the buffer with the engine's shape for this bucket")


# -- what crosses the bus per step ---------------------------------------------------------------

@dataclass(frozen=True)
class StepPlan:
    """Per step: ``upload`` host->device, ``download`` device->host; ``carry`` (input <- output of the
    previous step, ping-pong buffers on the device); ``external`` (inputs read from another engine's
    device buffer). Mapped host memory (integrated GPUs) turns upload/download into no copy at all."""

    upload: tuple[str, ...]
    download: tuple[str, ...]
    carry: tuple[tuple[str, str], ...]
    external: tuple[str, ...]
    resident: tuple[str, ...]  # inputs uploaded once (bind / reset) and then changed on the device only
    device_only: tuple[str, ...]  # outputs that never leave the device


def step_plan(inputs: Iterable[str], outputs: Iterable[str], carry: Mapping[str, str] | None = None,
              external: Iterable[str] = (), host_outputs: Iterable[str] | None = None,
              resident: Iterable[str] = ()) -> StepPlan:
    """Decide what is copied each step. ``host_outputs`` None means every output not carried.

    Raises :class:`TrtError` for a carry or host output that names no such tensor.
    """
    inputs, outputs = list(inputs), list(outputs)
    carry = dict(carry or {})
    external, resident = list(external), list(resident)
    for i, o in carry.items():
        if i not in inputs or o not in outputs:
            raise TrtError(f"carry {i!r} <- {o!r}: the engine's inputs are {inputs}, outputs {outputs}")
    for i in external:
        if i not in inputs:
            raise TrtError(f"device input {i!r} is not an input of the engine (inputs: {inputs})")
        if i in carry:
            raise TrtError(f"input {i!r} is both carried and fed from another engine's buffer")
    for i in resident:
        if i not in inputs or i in carry or i in external:
            raise TrtError(f"resident input {i!r} is not an input of the engine, or is already carried/fed "
                           f"(inputs: {inputs})")
    carried_out = set(carry.values())
    host = [o for o in outputs if o not in carried_out] if host_outputs is None else list(host_outputs)
    for o in host:
        if o not in outputs:
            raise TrtError(f"host output {o!r} is not an output of the engine (outputs: {outputs})")
    upload = tuple(i for i in inputs if i not in carry and i not in external and i not in resident)
    return StepPlan(upload, tuple(host), tuple(carry.items()), tuple(external), tuple(resident),
                    tuple(o for o in outputs if o not in host))


def shared_memory_bytes(per_profile: Iterable[int]) -> int:
    """Size of the activation block shared by every context of one engine: the largest profile's need,
    rounded up to :data:`DEVICE_ALIGN` (contexts run one at a time on the engine's stream)."""
    need = max((int(n) for n in per_profile), default=0)
    return -(-need // DEVICE_ALIGN) * DEVICE_ALIGN


@dataclass(frozen=True)
class SlotCopy:
    """A ``cudaMemcpy2DAsync`` into one slot of a cache: ``height`` rows of ``width`` bytes."""

    dst_offset: int  # bytes from the cache's start
    dst_pitch: int
    src_pitch: int
    width: int
    height: int


def slot_copy(cache_shape: Sequence[int], axis: int, slot: int, itemsize: int) -> SlotCopy:
    """Where one step's K or V (the cache shape without ``axis``) lands at ``slot`` along ``axis``.

    Whisper's ``self_k [1, heads, 64, 448]`` (axis 3) is one element per row; ``self_v
    [1, heads, 448, 64]`` (axis 2) is 64 contiguous elements per head.
    """
    shape = [int(d) for d in cache_shape]
    axis = axis % len(shape)
    if not 0 <= slot < shape[axis]:
        raise TrtError(f"cache slot {slot} is outside 0..{shape[axis] - 1}")
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64)) * itemsize  # bytes after the slot axis
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    return SlotCopy(dst_offset=slot * inner, dst_pitch=shape[axis] * inner, src_pitch=inner, width=inner, height=outer)


class DeviceAliases:
    """Host buffers bound as one engine's output and another's input (Whisper's cross K/V: the
    encoder writes them, every decoder step reads them). The input then reads the output's device
    buffer, so it is never uploaded, and the output need not be downloaded.

    Spans are found by host address, so a contiguous view of an output (``cross_k[i]``, one layer)
    maps to its offset inside the device buffer. One registry per set of engines that run in order
    on the same thread (a pack's factory); never shared across processes.
    """

    def __init__(self) -> None:
        self._spans: list[tuple[int, int, object, str]] = []  # (host start, nbytes, bound run, output name)

    def add(self, arr: np.ndarray, run, name: str) -> None:
        """``arr`` is output ``name`` of ``run`` (which has ``device_address(name, offset_bytes)``)."""
        self._spans.append((int(arr.ctypes.data), int(arr.nbytes), run, name))

    def lookup(self, arr: np.ndarray) -> int | None:
        """The device address that holds ``arr``'s bytes, or None when no bound output covers them."""
        start, size = int(arr.ctypes.data), int(arr.nbytes)
        for base, nbytes, run, name in self._spans:
            if base <= start and start + size <= base + nbytes:
                return run.device_address(name, start - base)
        return None
