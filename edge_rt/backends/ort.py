"""ONNX Runtime backend (CPU)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from edge_rt.errors import PackNotBuiltError


@dataclass(frozen=True)
class SessionOptions:
    """How an ONNX Runtime session is created."""

    intra_op_threads: int = 2  # the target boards and CI have 2 fast cores to spare
    inter_op_threads: int = 1
    graph_optimization: str = "all"  # "basic" | "extended" | "all"


_OPT_LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


class OrtEngine:
    """An ONNX model in an ONNX Runtime CPU session.

    Args:
        path: the ``.onnx`` file.
        options: thread counts and optimisation level.
    """

    def __init__(self, path: str | Path, options: SessionOptions = SessionOptions()):
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise PackNotBuiltError(
                f"engine file {path} does not exist; build the pack with "
                f"`python tools/build_engines.py --pack <name>`"
            )
        so = ort.SessionOptions()
        so.intra_op_num_threads = options.intra_op_threads
        so.inter_op_num_threads = options.inter_op_threads
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[options.graph_optimization])
        so.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own Fail/InvalidGraph types
            raise PackNotBuiltError(
                f"engine file {path} could not be loaded ({type(e).__name__}: {e}); it is corrupt or "
                f"truncated: rebuild the pack with `python tools/build_engines.py --pack <name> --force`"
            ) from e
        self.path = path
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._outputs = [o.name for o in self._session.get_outputs()]

    @property
    def input_names(self) -> list[str]:
        return self._inputs

    @property
    def output_names(self) -> list[str]:
        return self._outputs

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self._session.run(self._outputs, dict(inputs))
        return dict(zip(self._outputs, outs))

    def bind(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray | None], *,
             device_resident: Mapping[str, str] | None = None,
             host_outputs: Sequence[str] | None = None) -> "OrtBoundRun":
        """IOBinding over preallocated host buffers: each run reads ``inputs`` and writes ``outputs`` in place.

        The arrays must stay alive and keep their shapes; change their contents, not the objects.
        Names not given are an error, so nothing is silently allocated per call.

        An output given as ``None`` has a data-dependent shape (Piper's waveform): ONNX Runtime
        cannot write it into a preallocated buffer, so it allocates it on every run, and
        :meth:`OrtBoundRun.output` returns it. (A TensorRT runner needs an output allocator for
        such an output, and that engine cannot be captured in a CUDA graph.)

        Args:
            device_resident: ``{state_input: state_output}``; after every run the output is copied
                into the input's buffer (``np.copyto``, in place), and :meth:`OrtBoundRun.reset_state`
                zeroes those inputs. Each pair must have the same shape and dtype.
            host_outputs: the outputs the caller reads; on the CPU every output is on the host
                already, so this is only checked (every name must be an output).
        """
        missing = [n for n in self._inputs if n not in inputs] + [n for n in self._outputs if n not in outputs]
        if missing:
            raise ValueError(f"{self.path.name}: bind() needs buffers for {missing}")
        carried = _carry_pairs(self.path.name, inputs, outputs, device_resident or {})
        unknown = [n for n in (host_outputs or ()) if n not in outputs]
        if unknown:
            raise ValueError(f"{self.path.name}: host_outputs {unknown} are not outputs; outputs: {list(outputs)}")
        io = self._session.io_binding()
        for name, arr in inputs.items():
            _check_buffer(name, arr)
            io.bind_cpu_input(name, arr)
        for name, arr in outputs.items():
            if arr is None:  # data-dependent shape: ONNX Runtime allocates it per run
                io.bind_output(name, "cpu")
                continue
            _check_buffer(name, arr)
            io.bind_output(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        return OrtBoundRun(self._session, io, (inputs, outputs), carried, tuple(outputs))


def _carry_pairs(model: str, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray],
                 device_resident: Mapping[str, str]) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """(input buffer, output buffer) of each ``device_resident`` pair, checked."""
    pairs = []
    for src, dst in device_resident.items():
        if src not in inputs or outputs.get(dst) is None:
            raise ValueError(f"{model}: device_resident maps input {src!r} to output {dst!r}, but "
                             f"inputs are {list(inputs)} and outputs {list(outputs)}")
        state, nxt = inputs[src], outputs[dst]
        if state.shape != nxt.shape or state.dtype != nxt.dtype:
            raise ValueError(f"{model}: device_resident {src!r} is {state.dtype}{list(state.shape)} but output "
                             f"{dst!r} is {nxt.dtype}{list(nxt.shape)}; a carried state needs the same shape and dtype")
        if np.may_share_memory(state, nxt):
            raise ValueError(f"{model}: device_resident {src!r} and {dst!r} share memory; bind separate buffers "
                             f"(the graph would read the state while writing its next value)")
        pairs.append((state, nxt))
    return tuple(pairs)


def _check_buffer(name: str, arr: np.ndarray) -> None:
    if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
        raise ValueError(f"buffer {name!r} must be a C-contiguous numpy array")


class OrtBoundRun:
    """One bound step; keeps the buffers alive as long as it lives."""

    def __init__(self, session, binding, keep, carried: tuple[tuple[np.ndarray, np.ndarray], ...] = (),
                 order: tuple[str, ...] = ()):
        self._session, self._binding, self._keep, self._carried = session, binding, keep, carried
        self._order = order  # output names in binding order (the order of binding.get_outputs())
        # ONNX Runtime keeps the value it allocated bound, and the next run with another shape
        # fails: data-dependent outputs are bound afresh before every run.
        self._dynamic = tuple(n for n in order if keep[1][n] is None)

    def run(self) -> None:
        for name in self._dynamic:
            self._binding.bind_output(name, "cpu")
        self._session.run_with_iobinding(self._binding)
        for state, nxt in self._carried:
            np.copyto(state, nxt)

    def reset_state(self) -> None:
        """Zero every ``device_resident`` input (a new stream or utterance starts)."""
        for state, _ in self._carried:
            state.fill(0)

    def output(self, name: str) -> np.ndarray:
        """The last run's value of an output bound as ``None`` (data-dependent shape): a new array.

        Outputs bound to a buffer are read from that buffer instead.
        """
        if name not in self._order or self._keep[1][name] is not None:
            raise ValueError(f"output({name!r}): only outputs bound as None (data-dependent) are fetched; "
                             f"those are {[n for n in self._order if self._keep[1][n] is None]}")
        return self._binding.get_outputs()[self._order.index(name)].numpy()
