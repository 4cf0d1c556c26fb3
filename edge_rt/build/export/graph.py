"""A minimal ONNX graph builder over ``onnx.helper`` (numpy weights, no framework).

Used by the Whisper exporter; each method appends nodes and returns the name of
the output tensor, so a graph reads like the forward pass it encodes.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

OPSET = 17  # LayerNormalization is opset 17; TensorRT 8.6+ and ONNX Runtime parse it
LN_EPSILON = 1e-5  # Whisper's LayerNorm epsilon (PyTorch default)


class GraphBuilder:
    """Accumulates nodes and float32/int64 initializers for one ONNX graph."""

    def __init__(self, name: str):
        self.name = name
        self.nodes: list = []
        self.initializers: list = []
        self._n = 0

    # -- plumbing ---------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, value: np.ndarray | Sequence | float | int, name: str | None = None) -> str:
        """Add an initializer; float data is stored as float32, integers as int64."""
        from onnx import numpy_helper

        arr = np.asarray(value)
        arr = arr.astype(np.float32 if arr.dtype.kind == "f" else np.int64)
        name = name or self.fresh("const")
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], name: str | None = None, n_out: int = 1, **attrs):
        """Append one node; returns its output name (a list of names when ``n_out > 1``)."""
        from onnx import helper

        base = name or self.fresh(op_type.lower())
        outs = [base] if n_out == 1 else [f"{base}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=f"{base}_node", **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, inputs: list, outputs: list, doc: str = ""):
        """The finished ``onnx.ModelProto`` (ir/opset pinned for ONNX Runtime and TensorRT)."""
        from onnx import helper

        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, self.initializers, doc_string=doc)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="edge_rt")
        model.ir_version = 8  # opset 17 needs IR >= 8; older runtimes reject newer IR
        return model

    # -- layers -----------------------------------------------------------------
    def linear(self, x: str, weight: np.ndarray, bias: np.ndarray | None, name: str) -> str:
        """``x @ weight.T + bias``; ``weight`` is [out, in] (CTranslate2/PyTorch layout)."""
        y = self.op("MatMul", [x, self.const(np.ascontiguousarray(weight.T), f"{name}.weight")], f"{name}.matmul")
        if bias is None:
            return y
        return self.op("Add", [y, self.const(bias, f"{name}.bias")], f"{name}.out")

    def layer_norm(self, x: str, gamma: np.ndarray, beta: np.ndarray, name: str) -> str:
        g, b = self.const(gamma, f"{name}.gamma"), self.const(beta, f"{name}.beta")
        return self.op("LayerNormalization", [x, g, b], name, axis=-1, epsilon=LN_EPSILON)

    def gelu(self, x: str) -> str:
        """Exact (erf) GELU, spelled in opset-17 ops; ONNX Runtime fuses it into one kernel."""
        h = self.op("Div", [x, self.const(math.sqrt(2.0))])
        h = self.op("Add", [self.op("Erf", [h]), self.const(1.0)])
        return self.op("Mul", [self.op("Mul", [x, h]), self.const(0.5)])

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", [x, self.const(list(shape))])

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        return self.op("Transpose", [x], perm=list(perm))
