"""The one ONNX graph builder of the exporters, over ``onnx.helper`` (numpy weights, no framework).

Used by the Whisper (:mod:`whisper_graphs`) and Marian (:mod:`marian_graph`) exporters.
Each method appends nodes and returns the name of its output tensor, so a graph reads
like the forward pass it encodes::

    g = GraphBuilder("encoder")
    h = g.gelu(g.linear("x", w_in_out, bias, "fc1"))
    g.op("Softmax", [h], "probs", axis=-1)   # a graph output is just a named op
    model = g.model(inputs, outputs)

Naming: ``op(..., name)`` names the output tensor ``name`` and the node ``<name>_node``
(the INT8 recipes match node names such as ``ffn/linear_1``); without a name both are
fresh (``<op>_<n>``). ``const(value, name)`` adds an initializer once per name, so
shared constants (``Wemb``, ``axes0``) can be registered once and then referred to by name.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

OPSET = 17  # LayerNormalization is opset 17; TensorRT 8.6+ and ONNX Runtime parse it
IR_VERSION = 8  # opset 17 needs IR >= 8; older runtimes (ONNX Runtime < 1.14, TensorRT < 8.6) reject newer IR
LN_EPSILON = 1e-5  # Whisper's LayerNorm epsilon (PyTorch default); Marian passes its own


class GraphBuilder:
    """Accumulates nodes and float32/int64 initializers for one ONNX graph."""

    def __init__(self, name: str):
        self.name = name
        self.nodes: list = []
        self.initializers: list = []
        self._consts: dict = {}  # name -> its TensorProto in self.initializers
        self._n = 0

    # -- plumbing ---------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, value: np.ndarray | Sequence | float | int, name: str | None = None) -> str:
        """Add an initializer and return its name; float data is stored as float32, integers as int64.

        A name already registered returns that initializer when ``value`` is equal to it
        (one copy of a shared constant); a different value under the same name raises ValueError.
        """
        from onnx import numpy_helper

        arr = np.asarray(value)
        arr = arr.astype(np.float32 if arr.dtype.kind == "f" else np.int64, order="C")  # keeps 0-d scalars 0-d
        name = name or self.fresh("const")
        have = self._consts.get(name)
        if have is not None:
            old = numpy_helper.to_array(have)
            if old.shape != arr.shape or old.dtype != arr.dtype or not np.array_equal(old, arr):
                raise ValueError(f"constant {name!r} registered twice with different values")
            return name
        self._consts[name] = numpy_helper.from_array(arr, name)
        self.initializers.append(self._consts[name])
        return name

    def op(self, op_type: str, inputs: Sequence[str], name: str | None = None, n_out: int = 1, **attrs):
        """Append one node; returns its output name (a list of names when ``n_out > 1``)."""
        from onnx import helper

        base = name or self.fresh(op_type.lower())
        outs = [base] if n_out == 1 else [f"{base}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=f"{base}_node", **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, inputs: list, outputs: list, doc: str = ""):
        """The finished ``onnx.ModelProto`` (IR/opset pinned for ONNX Runtime and TensorRT)."""
        from onnx import helper

        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, self.initializers, doc_string=doc)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="edge_rt")
        model.ir_version = IR_VERSION
        return model

    # -- layers -----------------------------------------------------------------
    def linear(self, x: str, weight: np.ndarray, bias: np.ndarray | None, name: str) -> str:
        """``x @ weight + bias``; ``weight`` is [in, out] (MatMul layout: pass ``w.T`` for PyTorch's [out, in])."""
        y = self.op("MatMul", [x, self.const(weight, f"{name}.weight")], f"{name}.matmul")
        if bias is None:
            return y
        return self.op("Add", [y, self.const(np.reshape(bias, -1), f"{name}.bias")], f"{name}.out")

    def layer_norm(self, x: str, gamma: np.ndarray, beta: np.ndarray, name: str, epsilon: float = LN_EPSILON) -> str:
        """LayerNormalization over the last axis; ``gamma``/``beta`` are flattened to [d]."""
        g, b = self.const(np.reshape(gamma, -1), f"{name}.gamma"), self.const(np.reshape(beta, -1), f"{name}.beta")
        return self.op("LayerNormalization", [x, g, b], name, axis=-1, epsilon=epsilon)

    def gelu(self, x: str) -> str:
        """Exact (erf) GELU, spelled in opset-17 ops; ONNX Runtime fuses it into one kernel."""
        h = self.op("Div", [x, self.const(math.sqrt(2.0))])
        h = self.op("Add", [self.op("Erf", [h]), self.const(1.0)])
        return self.op("Mul", [self.op("Mul", [x, h]), self.const(0.5)])

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", [x, self.const(list(shape))])

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        return self.op("Transpose", [x], perm=list(perm))
