"""ONNX graphs of a Marian transformer-encoder / SSRU-decoder student.

Built with the exporters' one builder, :class:`edge_rt.build.export.graph.GraphBuilder`.

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

from edge_rt.build.export.graph import GraphBuilder
from edge_rt.stages.mt import marian_io as io

MASK_BIAS = -1e9  # added to attention scores of padded source positions
LN_EPS = 1e-9  # Marian's layer-norm epsilon

Weights = Callable[[str], np.ndarray]  # name -> float32 array, e.g. MarianModel.weight


def _linear(g: GraphBuilder, x: str, w: Weights, prefix: str, wname: str, bname: str | None) -> str:
    """``x @ W + b`` with Marian's ``<prefix><wname>`` ([in, out]) and ``<prefix><bname>``."""
    return g.linear(x, w(prefix + wname), None if bname is None else w(prefix + bname), prefix + wname)


def _layer_norm(g: GraphBuilder, x: str, w: Weights, prefix: str) -> str:
    return g.layer_norm(x, w(prefix + "_ln_scale"), w(prefix + "_ln_bias"), prefix + "_ln", epsilon=LN_EPS)


def _ffn(g: GraphBuilder, x: str, w: Weights, prefix: str) -> str:
    h = g.op("Relu", [_linear(g, x, w, prefix, "_W1", "_b1")])
    return _linear(g, h, w, prefix, "_W2", "_b2")


def _sinusoid(g: GraphBuilder, positions: str) -> str:
    """``positions`` float32 ``[..., 1]`` -> ``[..., D]`` Marian sinusoidal embedding."""
    half = io.DIM // 2
    inv = np.exp(np.arange(half, dtype=np.float32) * np.float32(-math.log(10000.0) / (half - 1)))
    v = g.op("Mul", [positions, g.const(inv.astype(np.float32), "inv_timescales")])
    return g.op("Concat", [g.op("Sin", [v]), g.op("Cos", [v])], axis=-1)


def _embed(g: GraphBuilder, ids: str) -> str:
    """Gather rows of the (already registered) ``Wemb`` and scale by sqrt(D)."""
    e = g.op("Gather", ["Wemb", ids], axis=0)
    return g.op("Mul", [e, g.const(np.array(math.sqrt(io.DIM), np.float32), "emb_scale")])


def _shape(g: GraphBuilder, dims: list[int]) -> str:
    """An int64 shape constant, one initializer per distinct shape."""
    return g.const(np.array(dims, np.int64), "shape_" + "_".join(str(d).replace("-", "m") for d in dims))


def _heads(g: GraphBuilder, x: str, transpose_last: bool = False) -> str:
    """``[1, S, D]`` -> ``[1, H, S, Dh]`` (or ``[1, H, Dh, S]`` with ``transpose_last``)."""
    r = g.op("Reshape", [x, _shape(g, [1, -1, io.HEADS, io.HEAD_DIM])])
    return g.op("Transpose", [r], perm=[0, 2, 3, 1] if transpose_last else [0, 2, 1, 3])


def _attention(g: GraphBuilder, q_heads: str, k_t: str, v: str, mask_bias: str, out_shape: list[int]) -> str:
    """softmax(q k^T / sqrt(Dh) + mask) v, heads merged back to ``out_shape``."""
    scores = g.op("MatMul", [q_heads, k_t])
    scores = g.op("Mul", [scores, g.const(np.array(1.0 / math.sqrt(io.HEAD_DIM), np.float32), "att_scale")])
    probs = g.op("Softmax", [g.op("Add", [scores, mask_bias])], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return g.op("Reshape", [ctx, _shape(g, out_shape)])


def _mask_bias(g: GraphBuilder, src_mask: str) -> str:
    """``[1, S]`` 1/0 mask -> ``[1, 1, 1, S]`` additive bias (0 or -1e9)."""
    one = g.const(np.array(1.0, np.float32), "one")
    bias = g.op("Mul", [g.op("Sub", [one, src_mask]), g.const(np.array(MASK_BIAS, np.float32), "mask_bias")])
    return g.op("Reshape", [bias, _shape(g, [1, 1, 1, -1])])


def build_encoder(w: Weights):
    """The encoder graph (``src_ids``, ``src_mask`` -> ``cross_k``, ``cross_v``)."""
    from onnx import TensorProto, helper

    g = GraphBuilder("marian_encoder")
    g.const(w("Wemb"), "Wemb")
    S = io.SRC_LEN_DIM
    ids, mask = io.ENC_INPUTS
    # positions 0..S-1 as float [S, 1]
    n = g.op("Gather", [g.op("Shape", [ids]), g.const(np.array(1, np.int64), "idx1")], axis=0)
    pos = g.op("Range", [g.const(np.array(0, np.int64), "zero_i"), n, g.const(np.array(1, np.int64), "one_i")])
    pos = g.op("Unsqueeze", [g.op("Cast", [pos], to=TensorProto.FLOAT), g.const(np.array([1], np.int64), "axes1")])
    x = g.op("Add", [_embed(g, ids), _sinusoid(g, pos)])  # [1, S, D]
    bias = _mask_bias(g, mask)

    for layer in range(1, io.ENC_LAYERS + 1):
        p = f"encoder_l{layer}_self"
        q = _heads(g, _linear(g, x, w, p, "_Wq", "_bq"))
        k = _heads(g, _linear(g, x, w, p, "_Wk", "_bk"), transpose_last=True)
        v = _heads(g, _linear(g, x, w, p, "_Wv", "_bv"))
        att = _attention(g, q, k, v, bias, [1, -1, io.DIM])
        x = _layer_norm(g, g.op("Add", [x, _linear(g, att, w, p, "_Wo", "_bo")]), w, p + "_Wo")
        p = f"encoder_l{layer}_ffn"
        x = _layer_norm(g, g.op("Add", [x, _ffn(g, x, w, p)]), w, p + "_ffn")

    # Context-attention keys/values of every decoder layer, computed once per sentence.
    ks, vs = [], []
    for layer in range(1, io.DEC_LAYERS + 1):
        p = f"decoder_l{layer}_context"
        ks.append(_heads(g, _linear(g, x, w, p, "_Wk", "_bk"), transpose_last=True))
        vs.append(_heads(g, _linear(g, x, w, p, "_Wv", "_bv")))
    g.op("Concat", [g.op("Unsqueeze", [k, g.const(np.array([0], np.int64), "axes0")]) for k in ks],
         name=io.ENC_OUTPUTS[0], axis=0)
    g.op("Concat", [g.op("Unsqueeze", [v, "axes0"]) for v in vs], name=io.ENC_OUTPUTS[1], axis=0)

    L, H, Dh = io.DEC_LAYERS, io.HEADS, io.HEAD_DIM
    inputs = [
        helper.make_tensor_value_info(ids, TensorProto.INT64, [1, S]),
        helper.make_tensor_value_info(mask, TensorProto.FLOAT, [1, S]),
    ]
    outputs = [
        helper.make_tensor_value_info(io.ENC_OUTPUTS[0], TensorProto.FLOAT, [L, 1, H, Dh, S]),
        helper.make_tensor_value_info(io.ENC_OUTPUTS[1], TensorProto.FLOAT, [L, 1, H, S, Dh]),
    ]
    return g.model(inputs, outputs, doc="Marian encoder + context K/V; see edge_rt/build/export/marian_graph.py")


def build_decoder(w: Weights):
    """The one-step decoder graph (see :mod:`edge_rt.stages.mt.marian_io`)."""
    from onnx import TensorProto, helper

    g = GraphBuilder("marian_decoder_step")
    wemb = g.const(w("Wemb"), "Wemb")
    prev, position, cross_k, cross_v, mask, state, vocab_ids = io.DEC_INPUTS
    S, L, H, Dh, D = io.SRC_LEN_DIM, io.DEC_LAYERS, io.HEADS, io.HEAD_DIM, io.DIM

    # Step 0 feeds START_TOKEN (-1): Marian's first decoder input is an all-zero embedding.
    zero_i = g.const(np.array(0, np.int64), "zero_i")
    emb = _embed(g, g.op("Max", [prev, zero_i]))  # [1, D]
    is_word = g.op("Cast", [g.op("GreaterOrEqual", [prev, zero_i])], to=TensorProto.FLOAT)  # [1]
    emb = g.op("Mul", [emb, g.op("Unsqueeze", [is_word, g.const(np.array([1], np.int64), "axes1")])])
    posf = g.op("Unsqueeze", [g.op("Cast", [position], to=TensorProto.FLOAT), "axes1"])  # [1, 1]
    x = g.op("Add", [emb, _sinusoid(g, posf)])  # [1, D]
    bias = _mask_bias(g, mask)

    new_states = []
    for layer in range(1, L + 1):
        idx = g.const(np.array(layer - 1, np.int64), f"layer{layer - 1}")
        c_prev = g.op("Gather", [state, idx], axis=0)  # [1, D]
        p = f"decoder_l{layer}_rnn"
        xw = _linear(g, x, w, p, "_W", None)
        f = g.op("Sigmoid", [_linear(g, x, w, p, "_Wf", "_bf")])
        one = g.const(np.array(1.0, np.float32), "one")
        c = g.op("Add", [g.op("Mul", [f, c_prev]), g.op("Mul", [g.op("Sub", [one, f]), xw])])
        new_states.append(g.op("Unsqueeze", [c, g.const(np.array([0], np.int64), "axes0")]))
        x = _layer_norm(g, g.op("Add", [x, g.op("Relu", [c])]), w, p + "_ffn")

        p = f"decoder_l{layer}_context"
        q = g.op("Reshape", [_linear(g, x, w, p, "_Wq", "_bq"), _shape(g, [1, H, 1, Dh])])
        k_t = g.op("Gather", [cross_k, idx], axis=0)  # [1, H, Dh, S]
        v = g.op("Gather", [cross_v, idx], axis=0)  # [1, H, S, Dh]
        att = _attention(g, q, k_t, v, bias, [1, D])
        x = _layer_norm(g, g.op("Add", [x, _linear(g, att, w, p, "_Wo", "_bo")]), w, p + "_Wo")
        p = f"decoder_l{layer}_ffn"
        x = _layer_norm(g, g.op("Add", [x, _ffn(g, x, w, p)]), w, p + "_ffn")

    g.op("Concat", new_states, name=io.DEC_OUTPUTS[1], axis=0)
    # Output layer over the requested ids only: with a lexical shortlist (a few hundred ids)
    # this is ~50x less weight traffic than the full 32000 x 256 projection, which dominates a step.
    out_b = g.const(w("decoder_ff_logit_out_b").reshape(-1), "decoder_ff_logit_out_b")
    out_w = g.op("Gather", [wemb, vocab_ids], axis=0)  # [K, D]
    out_b = g.op("Gather", [out_b, vocab_ids], axis=0)  # [K]
    g.op("Gemm", [x, out_w, out_b], name=io.DEC_OUTPUTS[0], transB=1)

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
    return g.model(inputs, outputs, doc="Marian one-step SSRU decoder; see edge_rt/build/export/marian_graph.py")
