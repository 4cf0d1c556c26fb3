"""The small protocol every stage talks to, whatever runs the graph, and the pure parts of
static-shape execution: bucket choice and buffer plans (shared by ONNX Runtime and TensorRT)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

import numpy as np


class BoundRun(Protocol):
    """One engine step over buffers bound once: inputs are read and outputs written in place."""

    def run(self) -> None: ...

    def reset_state(self) -> None:
        """Zero every ``device_resident`` input (the start of a new stream or utterance)."""
        ...

    def output(self, name: str) -> np.ndarray:
        """The last run's value of an output bound as ``None`` (data-dependent shape, e.g. Piper's waveform)."""
        ...


class Engine(Protocol):
    """One compiled graph with named inputs and outputs.

    Stages depend on this protocol only, never on ONNX Runtime or TensorRT.
    """

    @property
    def input_names(self) -> Sequence[str]: ...

    @property
    def output_names(self) -> Sequence[str]: ...

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; returns every output by name (allocates: for start-up and tools)."""
        ...

    def bind(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray], *,
             device_resident: Mapping[str, str] | None = None,
             host_outputs: Sequence[str] | None = None) -> BoundRun:
        """Bind preallocated, C-contiguous buffers; the returned step allocates nothing per call.

        ``device_resident`` maps a recurrent-state input to the output that becomes its next value
        (``{"state": "stateN"}``): after every ``run()`` the backend carries the output into the
        input itself, on the device where there is one, so state never crosses to the host per
        step; the stage never copies it. ``host_outputs`` names the outputs the stage reads after a
        step (default: all); a GPU backend downloads only those. On the CPU both are plain copies.
        An output given as ``None`` has a data-dependent shape: the backend allocates it per run and
        :meth:`BoundRun.output` returns it (the one case that allocates; no CUDA graph can hold it).
        """
        ...


def select_bucket(n: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``n`` items (the largest if none does: the caller splits)."""
    if not buckets:
        raise ValueError("no shape buckets given")
    ordered = sorted(buckets)
    for b in ordered:
        if b >= n:
            return b
    return ordered[-1]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name, e.g. "float32"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class BufferPlan:
    """Every input and output of one engine at one shape bucket, allocated once before the loop starts."""

    bucket: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (*self.inputs, *self.outputs))

    def allocate(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Zeroed, C-contiguous host buffers for the inputs and the outputs."""
        make = lambda specs: {t.name: np.zeros(t.shape, dtype=t.dtype) for t in specs}  # noqa: E731
        return make(self.inputs), make(self.outputs)


def plan_buckets(shapes: Mapping[int, tuple[Mapping[str, tuple[tuple[int, ...], str]],
                                           Mapping[str, tuple[tuple[int, ...], str]]]]) -> dict[int, BufferPlan]:
    """Buffer plans from ``{bucket: ({input: (shape, dtype)}, {output: (shape, dtype)})}``.

    Raises when a shape is not static (a dimension that is not a positive int).
    """
    plans = {}
    for bucket, (ins, outs) in shapes.items():
        specs = []
        for group in (ins, outs):
            row = []
            for name, (shape, dtype) in group.items():
                if not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape):
                    raise ValueError(f"bucket {bucket}: tensor {name!r} has a non-static shape {shape}; "
                                     f"every engine shape must be fixed per bucket")
                row.append(TensorSpec(name, tuple(int(d) for d in shape), np.dtype(dtype).name))
            specs.append(tuple(row))
        plans[bucket] = BufferPlan(bucket, specs[0], specs[1])
    return plans
