"""The one ONNX graph builder: constants, naming, and layers checked against numpy with ONNX Runtime."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, checker, helper, numpy_helper

from edge_rt.build.export.graph import IR_VERSION, OPSET, GraphBuilder


def _run(g: GraphBuilder, out: str, x: np.ndarray) -> np.ndarray:
    model = g.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                    [helper.make_tensor_value_info(out, TensorProto.FLOAT, [5, 3])])
    checker.check_model(model)
    assert model.ir_version == IR_VERSION and model.opset_import[0].version == OPSET
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run([out], {"x": x})[0]


def test_constants_keep_rank_and_become_float32_or_int64():
    g = GraphBuilder("t")
    scalar, ints = g.const(0.5, "half"), g.const([1, -1], "shape")
    arrays = {t.name: numpy_helper.to_array(t) for t in g.initializers}
    assert arrays[scalar].shape == () and arrays[scalar].dtype == np.float32
    assert arrays[ints].dtype == np.int64 and arrays[ints].tolist() == [1, -1]
    assert g.const(np.zeros((2, 3)).T).startswith("const_")  # a transposed view is stored C-ordered


def test_a_named_constant_is_stored_once_and_cannot_change():
    g = GraphBuilder("t")
    assert g.const(np.array([0], np.int64), "axes0") == g.const([0], "axes0") == "axes0"
    assert [t.name for t in g.initializers] == ["axes0"]
    with pytest.raises(ValueError, match="axes0"):
        g.const([1], "axes0")


def test_op_names_its_output_and_node():
    g = GraphBuilder("t")
    assert g.op("Relu", ["x"], "ffn/linear_1") == "ffn/linear_1"
    assert g.nodes[-1].name == "ffn/linear_1_node"  # the INT8 recipes match node names
    assert g.op("Split", ["x"], "s", n_out=2, axis=0) == ["s_0", "s_1"]
    assert g.op("Relu", ["x"]) == "relu_1"


def test_layers_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 4)).astype(np.float32)
    w, b = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    gamma, beta = rng.standard_normal(5).astype(np.float32), rng.standard_normal((1, 5)).astype(np.float32)
    g = GraphBuilder("t")
    h = g.linear("x", w, b, "fc")  # weight in [in, out]
    y = g.gelu(g.layer_norm(h, gamma, beta, "ln", epsilon=1e-9))
    out = g.transpose(g.reshape(y, [3, 5]), [1, 0])
    ref = x @ w + b
    ref = (ref - ref.mean(-1, keepdims=True)) / np.sqrt(ref.var(-1, keepdims=True) + 1e-9) * gamma + beta
    ref = 0.5 * ref * (1 + np.vectorize(math.erf)(ref / math.sqrt(2.0)))
    np.testing.assert_allclose(_run(g, out, x), ref.reshape(3, 5).T, rtol=1e-5, atol=1e-5)
    assert "fc.weight" in {t.name for t in g.initializers} and g.nodes[0].name == "fc.matmul_node"
