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
