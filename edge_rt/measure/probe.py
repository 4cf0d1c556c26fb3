"""A machine-speed probe: a fixed tiny ONNX graph timed in the same run as the stages.

The perf-regression check divides every stage time by this probe's time, so a
machine that is twice as slow (or twice as loaded) moves both alike and the
ratio stays put, while a stage that got twice as slow moves only its own side.
The graph is what the stages spend most of their time in: float32 GEMMs with a
ReLU and a residual, run by ONNX Runtime on the same number of threads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = ["SpeedProbe", "ProbeOptions"]

ROWS = 128  # tokens per call (an encoder slab)
WIDTH = 384  # model width (Whisper base is 512, tiny 384)
HIDDEN = 4 * WIDTH  # feed-forward width, as in the transformers the stages run
LAYERS = 6  # 6 x (MatMul, ReLU, MatMul, Add): ~1.8 GFLOP per call, long enough not to fit in a brief idle moment


@dataclass(frozen=True)
class ProbeOptions:
    threads: int = 2  # ONNX Runtime intra-op threads: the stages' count, so both compete alike for cores
    calls: int = 6  # runs per measurement, back to back
    seed: int = 0  # weights are fixed by this seed: the workload never changes between runs

    def __post_init__(self):
        if self.threads < 1 or self.calls < 1:
            raise ValueError(f"ProbeOptions needs threads >= 1 and calls >= 1, got {self.threads}, {self.calls}")


def _graph(seed: int) -> bytes:
    """The probe's ONNX model, serialized: x[ROWS, WIDTH] -> LAYERS feed-forward blocks -> y."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for i in range(LAYERS):
        w1 = (rng.standard_normal((WIDTH, HIDDEN)) / np.sqrt(WIDTH)).astype(np.float32)
        w2 = (rng.standard_normal((HIDDEN, WIDTH)) / np.sqrt(HIDDEN)).astype(np.float32)
        inits += [numpy_helper.from_array(w1, f"w1_{i}"), numpy_helper.from_array(w2, f"w2_{i}")]
        nodes += [helper.make_node("MatMul", [cur, f"w1_{i}"], [f"h_{i}"]),
                  helper.make_node("Relu", [f"h_{i}"], [f"r_{i}"]),
                  helper.make_node("MatMul", [f"r_{i}", f"w2_{i}"], [f"o_{i}"]),
                  helper.make_node("Add", [cur, f"o_{i}"], [f"y_{i}" if i < LAYERS - 1 else "y"])]
        cur = f"y_{i}"
    graph = helper.make_graph(nodes, "edge_rt_speed_probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, WIDTH])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


class SpeedProbe:
    """Create once (builds the graph and the session), then call it to time it."""

    def __init__(self, options: ProbeOptions = ProbeOptions(), wrap=None):
        """``wrap``: a function that wraps the timed call (the bench's test-only slowdown hook, see slowdown.py)."""
        import onnxruntime as ort

        self.options = options
        so = ort.SessionOptions()
        so.intra_op_num_threads = options.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self._session = ort.InferenceSession(_graph(options.seed), so, providers=["CPUExecutionProvider"])
        self._x = np.random.default_rng(options.seed + 1).standard_normal((ROWS, WIDTH)).astype(np.float32)
        self._session.run(None, {"x": self._x})  # first call allocates; not timed
        self._once = self._run if wrap is None else wrap(self._run)

    def _run(self) -> None:
        self._session.run(None, {"x": self._x})

    def __call__(self) -> float:
        """Milliseconds per run, over ``calls`` runs back to back (one window of ~0.1 s, as long as a decode)."""
        t0 = time.perf_counter()
        for _ in range(self.options.calls):
            self._once()
        return (time.perf_counter() - t0) * 1000 / self.options.calls
