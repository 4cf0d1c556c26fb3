"""ONNX Runtime backend (CPU)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

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

    def bind(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> "OrtBoundRun":
        """IOBinding over preallocated host buffers: each run reads ``inputs`` and writes ``outputs`` in place.

        The arrays must stay alive and keep their shapes; change their contents, not the objects.
        Names not given are an error, so nothing is silently allocated per call.
        """
        missing = [n for n in self._inputs if n not in inputs] + [n for n in self._outputs if n not in outputs]
        if missing:
            raise ValueError(f"{self.path.name}: bind() needs buffers for {missing}")
        io = self._session.io_binding()
        for name, arr in inputs.items():
            _check_buffer(name, arr)
            io.bind_cpu_input(name, arr)
        for name, arr in outputs.items():
            _check_buffer(name, arr)
            io.bind_output(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        return OrtBoundRun(self._session, io, (inputs, outputs))


def _check_buffer(name: str, arr: np.ndarray) -> None:
    if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
        raise ValueError(f"buffer {name!r} must be a C-contiguous numpy array")


class OrtBoundRun:
    """One bound step; keeps the buffers alive as long as it lives."""

    def __init__(self, session, binding, keep):
        self._session, self._binding, self._keep = session, binding, keep

    def run(self) -> None:
        self._session.run_with_iobinding(self._binding)
