"""ONNX graphs of a Marian transformer-encoder / SSRU-decoder student, built with ``onnx.helper``.

The maths follows Marian's ``transformer`` model with ``transformer-postprocess: dan``
(post-norm: ``LayerNorm(x + sublayer(x))``), ``transformer-postprocess-emb: d`` (no
embedding norm) and ``transformer-decoder-autoreg: rnn`` with ``dec-cell: ssru``:

* embeddings: ``Wemb[id] * sqrt(D) + sinusoid(pos)`` where the sinusoid is
  ``[sin(p * t_i), cos(p * t_i)]`` (halves concatenated), ``t_i = exp(-i ln(1e4) / (D/2 - 1))``;
* attention: 8 heads, scores scaled by ``1/sqrt(Dh)``, masked keys biased by -1e9;
* FFN: ``relu(x W1 + b1) W2 + b2``;
* SSRU: ``f = sigmoid(x Wf + bf)``, ``c = f * c_prev + (1 - f) * (x W)``, output ``relu(c)``;
* output layer tied to the embeddings: ``logits = h Wemb[ids]^T + b[ids]`` for the requested ids.

See :mod:`edge_rt.stages.mt.marian_io` for the graph inputs and outputs.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from edge_rt.stages.mt import marian_io as io
OPSET = 17  # LayerNormalization
MASK_BIAS = -1e9  # added to attention scores of padded source positions
LN_EPS = 1e-9  # Marian's layer-norm epsilon

Weights = Callable[[str], np.ndarray]  # name -> float32 array, e.g. MarianModel.weight


class GraphBuilder:
    """Collects nodes and initializers; every helper returns the name of its output."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.initializers: list = []
        self._names: set[str] = set()
        self._count = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, name: str, value: np.ndarray) -> str:
        """An initializer (added once per name)."""
        from onnx import numpy_helper

        if name not in self._names:
            self._names.add(name)
            self.initializers.append(numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, outputs: list[str] | None = None,
           **attrs) -> str:
        from onnx import helper

        outs = outputs or [self.fresh(hint or op_type.lower())]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.fresh(f"n_{op_type}"), **attrs))
        return outs[0]

    # --- small blocks -------------------------------------------------------------
    def linear(self, x: str, w: Weights, prefix: str, wname: str, bname: str | None) -> str:
        y = self.op("MatMul", [x, self.const(prefix + wname, w(prefix + wname))])
        if bname is None:
            return y
        return self.op("Add", [y, self.const(prefix + bname, w(prefix + bname).reshape(-1))])

    def layer_norm(self, x: str, w: Weights, prefix: str) -> str:
        g = self.const(prefix + "_ln_scale", w(prefix + "_ln_scale").reshape(-1))
        b = self.const(prefix + "_ln_bias", w(prefix + "_ln_bias").reshape(-1))
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=LN_EPS)

    def ffn(self, x: str, w: Weights, prefix: str) -> str:
        h = self.op("Relu", [self.linear(x, w, prefix, "_W1", "_b1")])
        return self.linear(h, w, prefix, "_W2", "_b2")

    def shape(self, dims: list[int]) -> str:
        return self.const("shape_" + "_".join(str(d).replace("-", "m") for d in dims), np.array(dims, np.int64))

    def sinusoid(self, positions: str) -> str:
        """``positions`` float32 ``[..., 1]`` -> ``[..., D]`` Marian sinusoidal embedding."""
        half = io.DIM // 2
        inv = np.exp(np.arange(half, dtype=np.float32) * np.float32(-math.log(10000.0) / (half - 1)))
        v = self.op("Mul", [positions, self.const("inv_timescales", inv.astype(np.float32))])
        return self.op("Concat", [self.op("Sin", [v]), self.op("Cos", [v])], axis=-1)

    def embed(self, ids: str) -> str:
        """Gather rows of the (already registered) ``Wemb`` and scale by sqrt(D)."""
        e = self.op("Gather", ["Wemb", ids], axis=0)
        return self.op("Mul", [e, self.const("emb_scale", np.array(math.sqrt(io.DIM), np.float32))])


def _heads(g: GraphBuilder, x: str, transpose_last: bool = False) -> str:
    """``[1, S, D]`` -> ``[1, H, S, Dh]`` (or ``[1, H, Dh, S]`` with ``transpose_last``)."""
    r = g.op("Reshape", [x, g.shape([1, -1, io.HEADS, io.HEAD_DIM])])
    return g.op("Transpose", [r], perm=[0, 2, 3, 1] if transpose_last else [0, 2, 1, 3])


def _attention(g: GraphBuilder, q_heads: str, k_t: str, v: str, mask_bias: str, out_shape: list[int]) -> str:
    """softmax(q k^T / sqrt(Dh) + mask) v, heads merged back to ``out_shape``."""
    scores = g.op("MatMul", [q_heads, k_t])
    scores = g.op("Mul", [scores, g.const("att_scale", np.array(1.0 / math.sqrt(io.HEAD_DIM), np.float32))])
    probs = g.op("Softmax", [g.op("Add", [scores, mask_bias])], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return g.op("Reshape", [ctx, g.shape(out_shape)])


def _mask_bias(g: GraphBuilder, src_mask: str) -> str:
    """``[1, S]`` 1/0 mask -> ``[1, 1, 1, S]`` additive bias (0 or -1e9)."""
    one = g.const("one", np.array(1.0, np.float32))
    bias = g.op("Mul", [g.op("Sub", [one, src_mask]), g.const("mask_bias", np.array(MASK_BIAS, np.float32))])
    return g.op("Reshape", [bias, g.shape([1, 1, 1, -1])])


def build_encoder(w: Weights):
    """The encoder graph (``src_ids``, ``src_mask`` -> ``cross_k``, ``cross_v``)."""
    from onnx import TensorProto, helper

    g = GraphBuilder()
    g.const("Wemb", w("Wemb"))
    S = io.SRC_LEN_DIM
    ids, mask = io.ENC_INPUTS
    # positions 0..S-1 as float [S, 1]
    n = g.op("Gather", [g.op("Shape", [ids]), g.const("idx1", np.array(1, np.int64))], axis=0)
    pos = g.op("Range", [g.const("zero_i", np.array(0, np.int64)), n, g.const("one_i", np.array(1, np.int64))])
    pos = g.op("Unsqueeze", [g.op("Cast", [pos], to=TensorProto.FLOAT), g.const("axes1", np.array([1], np.int64))])
    x = g.op("Add", [g.embed(ids), g.sinusoid(pos)])  # [1, S, D]
    bias = _mask_bias(g, mask)

    for layer in range(1, io.ENC_LAYERS + 1):
        p = f"encoder_l{layer}_self"
        q = _heads(g, g.linear(x, w, p, "_Wq", "_bq"))
        k = _heads(g, g.linear(x, w, p, "_Wk", "_bk"), transpose_last=True)
        v = _heads(g, g.linear(x, w, p, "_Wv", "_bv"))
        att = _attention(g, q, k, v, bias, [1, -1, io.DIM])
        x = g.layer_norm(g.op("Add", [x, g.linear(att, w, p, "_Wo", "_bo")]), w, p + "_Wo")
        p = f"encoder_l{layer}_ffn"
        x = g.layer_norm(g.op("Add", [x, g.ffn(x, w, p)]), w, p + "_ffn")

    # Context-attention keys/values of every decoder layer, computed once per sentence.
    ks, vs = [], []
    for layer in range(1, io.DEC_LAYERS + 1):
        p = f"decoder_l{layer}_context"
        ks.append(_heads(g, g.linear(x, w, p, "_Wk", "_bk"), transpose_last=True))
        vs.append(_heads(g, g.linear(x, w, p, "_Wv", "_bv")))
    g.op("Concat", [g.op("Unsqueeze", [k, g.const("axes0", np.array([0], np.int64))]) for k in ks],
         outputs=[io.ENC_OUTPUTS[0]], axis=0)
    g.op("Concat", [g.op("Unsqueeze", [v, "axes0"]) for v in vs], outputs=[io.ENC_OUTPUTS[1]], axis=0)

    L, H, Dh = io.DEC_LAYERS, io.HEADS, io.HEAD_DIM
    inputs = [
        helper.make_tensor_value_info(ids, TensorProto.INT64, [1, S]),
        helper.make_tensor_value_info(mask, TensorProto.FLOAT, [1, S]),
    ]
    outputs = [
        helper.make_tensor_value_info(io.ENC_OUTPUTS[0], TensorProto.FLOAT, [L, 1, H, Dh, S]),
        helper.make_tensor_value_info(io.ENC_OUTPUTS[1], TensorProto.FLOAT, [L, 1, H, S, Dh]),
    ]
    return _model(g, "marian_encoder", inputs, outputs)


def build_decoder(w: Weights):
    """The one-step decoder graph (see :mod:`edge_rt.stages.mt.marian_io`)."""
    from onnx import TensorProto, helper

    g = GraphBuilder()
    wemb = g.const("Wemb", w("Wemb"))
    prev, position, cross_k, cross_v, mask, state, vocab_ids = io.DEC_INPUTS
    S, L, H, Dh, D = io.SRC_LEN_DIM, io.DEC_LAYERS, io.HEADS, io.HEAD_DIM, io.DIM

    # Step 0 feeds START_TOKEN (-1): Marian's first decoder input is an all-zero embedding.
    zero_i = g.const("zero_i", np.array(0, np.int64))
    emb = g.embed(g.op("Max", [prev, zero_i]))  # [1, D]
    is_word = g.op("Cast", [g.op("GreaterOrEqual", [prev, zero_i])], to=TensorProto.FLOAT)  # [1]
    emb = g.op("Mul", [emb, g.op("Unsqueeze", [is_word, g.const("axes1", np.array([1], np.int64))])])
    posf = g.op("Unsqueeze", [g.op("Cast", [position], to=TensorProto.FLOAT), "axes1"])  # [1, 1]
    x = g.op("Add", [emb, g.sinusoid(posf)])  # [1, D]
    bias = _mask_bias(g, mask)

    new_states = []
    for layer in range(1, L + 1):
        idx = g.const(f"layer{layer - 1}", np.array(layer - 1, np.int64))
        c_prev = g.op("Gather", [state, idx], axis=0)  # [1, D]
        p = f"decoder_l{layer}_rnn"
        xw = g.linear(x, w, p, "_W", None)
        f = g.op("Sigmoid", [g.linear(x, w, p, "_Wf", "_bf")])
        one = g.const("one", np.array(1.0, np.float32))
        c = g.op("Add", [g.op("Mul", [f, c_prev]), g.op("Mul", [g.op("Sub", [one, f]), xw])])
        new_states.append(g.op("Unsqueeze", [c, g.const("axes0", np.array([0], np.int64))]))
        x = g.layer_norm(g.op("Add", [x, g.op("Relu", [c])]), w, p + "_ffn")

        p = f"decoder_l{layer}_context"
        q = g.op("Reshape", [g.linear(x, w, p, "_Wq", "_bq"), g.shape([1, H, 1, Dh])])
        k_t = g.op("Gather", [cross_k, idx], axis=0)  # [1, H, Dh, S]
        v = g.op("Gather", [cross_v, idx], axis=0)  # [1, H, S, Dh]
        att = _attention(g, q, k_t, v, bias, [1, D])
        x = g.layer_norm(g.op("Add", [x, g.linear(att, w, p, "_Wo", "_bo")]), w, p + "_Wo")
        p = f"decoder_l{layer}_ffn"
        x = g.layer_norm(g.op("Add", [x, g.ffn(x, w, p)]), w, p + "_ffn")

    g.op("Concat", new_states, outputs=[io.DEC_OUTPUTS[1]], axis=0)
    # Output layer over the requested ids only: with a lexical shortlist (a few hundred ids)
    # this is ~50x less weight traffic than the full 32000 x 256 projection, which dominates a step.
    out_b = g.const("decoder_ff_logit_out_b", w("decoder_ff_logit_out_b").reshape(-1))
    out_w = g.op("Gather", [wemb, vocab_ids], axis=0)  # [K, D]
    out_b = g.op("Gather", [out_b, vocab_ids], axis=0)  # [K]
    g.op("Gemm", [x, out_w, out_b], outputs=[io.DEC_OUTPUTS[0]], transB=1)

    inputs = [
        helper.make_tensor_value_info(prev, TensorProto.INT64, [1]),
        helper.make_tensor_value_info(position, TensorProto.INT64, [1]),
        helper.make_tensor_value_info(cross_k, TensorProto.FLOAT, [L, 1, H, Dh, S]),
        helper.make_tensor_value_info(cross_v, TensorProto.FLOAT, [L, 1, H, S, Dh]),
        helper.make_tensor_value_info(mask, TensorProto.FLOAT, [1, S]),
        helper.make_tensor_value_info(state, TensorProto.FLOAT, [L, 1, D]),
        helper.make_tensor_value_info(vocab_ids, TensorProto.INT64, [io.VOCAB_LEN_DIM]),
    ]
    outputs = [
        helper.make_tensor_value_info(io.DEC_OUTPUTS[0], TensorProto.FLOAT, [1, io.VOCAB_LEN_DIM]),
        helper.make_tensor_value_info(io.DEC_OUTPUTS[1], TensorProto.FLOAT, [L, 1, D]),
    ]
    return _model(g, "marian_decoder_step", inputs, outputs)


def _model(g: GraphBuilder, name: str, inputs: list, outputs: list):
    from onnx import helper

    graph = helper.make_graph(g.nodes, name, inputs, outputs, initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="edge_rt")
    model.ir_version = 8  # readable by ONNX Runtime >= 1.14 and TensorRT 8.6+
    return model
