"""Whisper as two static-shape ONNX graphs, built from CTranslate2 weights.

Encoder (``whisper_encoder.onnx``), one graph for every window bucket:

    mel      [1, n_mels, frames]                  float32  log-mel (edge_rt.stages.asr.mel)
    -> cross_k  [n_text_layer, 1, n_text_head, d_head, positions]  float32
       cross_v  [n_text_layer, 1, n_text_head, positions, d_head]  float32

``frames`` is symbolic but only ever a bucket size (500..3000 mel frames);
``positions = frames / 2``. The positional table is sliced to ``positions``
inside the graph. The encoder ends by projecting its output through every decoder
layer's cross-attention K/V weights, so the decoder never recomputes them. K is
stored transposed (``d_head`` before ``positions``) so the decoder's ``q @ K`` is
a plain MatMul.

Decoder (``whisper_decoder.onnx``), one token of each of ``beams`` sequences per call, every shape
static except ``positions`` and ``beams``:

    tokens      [beams, 1]                                int64   each sequence's token at ``offset``
    offset      [1]                                       int64   their position, 0..447
    self_k_<i>  [beams, n_text_head, d_head, 448]         float32 past keys of layer i (transposed)
    self_v_<i>  [beams, n_text_head, 448, d_head]         float32 past values of layer i
    cross_k_<i> [1, n_text_head, d_head, positions]       float32 ``cross_k[i]`` of the encoder (every
    cross_v_<i> [1, n_text_head, positions, d_head]       float32 ``cross_v[i]``  sequence reads the same audio)
    -> logits   [beams, n_vocab]                          float32
       new_k    [n_text_layer, beams, n_text_head, d_head] float32 this step's keys
       new_v    [n_text_layer, beams, n_text_head, d_head] float32 this step's values

``beams`` is 1 for greedy decoding and the beam width for beam search (every hypothesis of a beam
has the same length, so one ``offset`` serves all): two bound shapes, like the window buckets. One
graph for both, so its weights are loaded once; a beam step reads them once for all hypotheses.

The caches are read-only inputs: positions ``>= offset`` are masked out and the
current token attends to itself through ``new_k``/``new_v`` directly, so the graph
never copies a 448-position cache. The caller writes ``new_k`` into
``self_k[..., offset]`` and ``new_v`` into ``self_v[..., offset, :]`` of its
preallocated arrays (``n_text_layer * d_model`` floats per step), and passes
per-layer views of those arrays, which ONNX Runtime reads without copying.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from edge_rt.build.export.ct2 import Ct2Model, Ct2FormatError
from edge_rt.build.export.graph import GraphBuilder
from edge_rt.units import MAX_TEXT_CTX

MASKED = -1e9  # additive attention mask for cache slots not yet written (exp() underflows to 0)
BEAMS = "beams"  # the decoder's batch dimension: 1 (greedy) or the beam width
# The encoder's self-attention in 5 runs of query positions (see _attention). At the 30-s window its
# [8, 1500, 1500] scores and softmax (72 MB each) were the largest buffers of the loop's worst case, a joint
# decode's 30-s window. Whisper base FP32, 2 threads, the outputs bound as the stage binds them (2026-12-05,
# AMD EPYC, AVX2): the encoder's peak at the 30-s window 393 -> 330 MB with 5 chunks (outputs not bound:
# 358 -> 295 MB with 5 chunks, 292 with 10). Time, best of 5 in five interleaved rounds: 5-s window +3.6 %
# (50 query rows a chunk), 10-s +1.2 %, 20/30-s within the rounds' spread. The loop's peak with the joint
# decode's 30-s window (`python -m edge_rt.measure.memory`, bench's 7 clips, default pack, page cache dropped
# before each run; 2026-12-05, same machine): 577.5 -> 537.7 MB. Not taken: the cross K and V from
# two GEMMs instead of one and a Split (273 MB with the chunks, FP32 the same bit for bit) moved the INT8
# encoder's outputs: two MatMuls quantized where there was one.
ATTENTION_CHUNKS = 5


@dataclass(frozen=True)
class WhisperDims:
    """Model sizes, named as in OpenAI Whisper's ``ModelDimensions``."""

    n_mels: int
    n_audio_ctx: int  # encoder positions of a 30-s window (1500)
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_text_ctx: int  # decoder positions (448)
    n_text_state: int
    n_text_head: int
    n_text_layer: int
    n_vocab: int

    @classmethod
    def from_ct2(cls, m: Ct2Model) -> "WhisperDims":
        if m.spec != "WhisperSpec":
            raise Ct2FormatError(f"expected a CTranslate2 WhisperSpec model.bin, got spec {m.spec!r}")
        def n_layers(side: str) -> int:
            return sum(1 for k in m.variables if k.startswith(f"{side}/layer_") and k.endswith("ffn/linear_0/weight"))

        n_audio_layer, n_text_layer = n_layers("encoder"), n_layers("decoder")
        n_audio_ctx, n_audio_state = m["encoder/position_encodings/encodings"].shape
        n_text_ctx, n_text_state = m["decoder/position_encodings/encodings"].shape
        return cls(
            n_mels=m["encoder/conv1/weight"].shape[1],
            n_audio_ctx=n_audio_ctx,
            n_audio_state=n_audio_state,
            n_audio_head=m.scalar("encoder/num_heads"),
            n_audio_layer=n_audio_layer,
            n_text_ctx=n_text_ctx,
            n_text_state=n_text_state,
            n_text_head=m.scalar("decoder/num_heads"),
            n_text_layer=n_text_layer,
            n_vocab=m["decoder/embeddings/weight"].shape[0],
        )

    def as_dict(self) -> dict:
        return asdict(self)


def _check_decoder_kind(m: Ct2Model) -> None:
    """The graphs hard-code Whisper's decoder: pre-norm, exact GELU, no ALiBi, unscaled embeddings."""
    expected = {"decoder/pre_norm": 1, "decoder/activation": 3, "decoder/scale_embeddings": 0, "decoder/alibi": 0}
    for name, value in expected.items():
        if name in m.variables and m.scalar(name) != value:
            raise Ct2FormatError(f"{name} = {m.scalar(name)}, but Whisper export needs {value}")


def _ln(g: GraphBuilder, m: Ct2Model, x: str, p: str) -> str:
    """LayerNorm with the CTranslate2 variables ``<p>/layer_norm/{gamma,beta}``."""
    return g.layer_norm(x, m.f32(f"{p}/layer_norm/gamma"), m.f32(f"{p}/layer_norm/beta"), f"{p}.ln")


def _lin(g: GraphBuilder, m: Ct2Model, x: str, p: str, q_scale: float = 1.0, q_rows: int = 0) -> str:
    """Linear layer ``<p>/{weight,bias}``; the first ``q_rows`` outputs (the query) scaled by ``q_scale``."""
    w, b = m.f32(f"{p}/weight").copy(), m.f32(f"{p}/bias").copy()
    w[:q_rows] *= q_scale  # 1/sqrt(d_head) folded into the query projection: no Mul in the graph
    b[:q_rows] *= q_scale
    return g.linear(x, w.T, b, p)  # CTranslate2 stores [out, in]


def _split_heads_q(g: GraphBuilder, x: str, heads: int, d_head: int) -> str:
    """[1, T, d] -> [1, heads, T, d_head]."""
    return g.transpose(g.reshape(x, [1, -1, heads, d_head]), [0, 2, 1, 3])


def _attention(g: GraphBuilder, q: str, k: str, v: str, chunks: int, p: str) -> str:
    """softmax(q @ k) @ v, ``q`` [1, H, P, dh] cut into ``chunks`` runs of query positions.

    Each query row's scores are computed and normalised alone, so the chunks' outputs, concatenated, are the
    unchunked attention's (bit for bit on ONNX Runtime's CPU kernels: ``tests/build/export/test_whisper.py``);
    only the [1, H, P / chunks, P] score and softmax buffers are alive at a time instead of [1, H, P, P]
    (at the 30-s window 14.4 MB each instead of 72 MB with 5 chunks). ``P`` is symbolic: chunk ``c`` is
    ``[c * (P // chunks), (c + 1) * (P // chunks))``, the last one runs to the end, so any ``P`` is covered;
    the window buckets' ``P`` (250..1500) are multiples of 5.
    """
    if chunks <= 1:
        return g.op("MatMul", [g.op("Softmax", [g.op("MatMul", [q, k])], axis=-1), v])
    axis, rows = g.const([2]), g.const([3])
    step = g.op("Div", [g.op("Slice", [g.op("Shape", [q]), axis, rows]), g.const([chunks])], f"{p}.chunk_len")
    start, outs = g.const([0]), []
    for c in range(chunks):
        end = g.op("Add", [start, step]) if c < chunks - 1 else g.const([np.iinfo(np.int64).max])
        q_c = g.op("Slice", [q, start, end, axis], f"{p}.q_chunk{c}")
        outs.append(g.op("MatMul", [g.op("Softmax", [g.op("MatMul", [q_c, k])], axis=-1), v]))
        if c < chunks - 1:
            # The next chunk starts where this one's output ends: a data dependency that keeps the chunks in
            # order whatever order a tool writes the nodes in. ONNX Runtime's quantizer sorts a graph breadth
            # first, which put every chunk's scores before the first softmax, all alive at once.
            start = g.op("Add", [start, g.op("Slice", [g.op("Shape", [outs[-1]]), axis, rows])])
    return g.op("Concat", outs, f"{p}.chunks", axis=2)


def _encoder_block(g: GraphBuilder, m: Ct2Model, x: str, i: int, heads: int, d: int, chunks: int) -> str:
    p = f"encoder/layer_{i}/self_attention"
    d_head = d // heads
    qkv = _lin(g, m, _ln(g, m, x, p), f"{p}/linear_0", d_head**-0.5, d)
    q, k, v = g.op("Split", [qkv, g.const([d, d, d])], f"{p}.split", n_out=3, axis=2)
    q = _split_heads_q(g, q, heads, d_head)
    k = g.transpose(g.reshape(k, [1, -1, heads, d_head]), [0, 2, 3, 1])  # [1, H, dh, P]
    v = _split_heads_q(g, v, heads, d_head)
    o = g.reshape(g.transpose(_attention(g, q, k, v, chunks, p), [0, 2, 1, 3]), [1, -1, d])
    x = g.op("Add", [x, _lin(g, m, o, f"{p}/linear_1")])
    return g.op("Add", [x, _ffn(g, m, x, f"encoder/layer_{i}/ffn")])


def _ffn(g: GraphBuilder, m: Ct2Model, x: str, p: str) -> str:
    h = g.gelu(_lin(g, m, _ln(g, m, x, p), f"{p}/linear_0"))
    return _lin(g, m, h, f"{p}/linear_1")


def encoder_graph(m: Ct2Model, dims: WhisperDims, attention_chunks: int = ATTENTION_CHUNKS):
    """The encoder + cross-attention K/V projection as an ``onnx.ModelProto`` (see module doc).

    ``attention_chunks``: runs of query positions each self-attention is computed in (see :func:`_attention`).
    """
    from onnx import TensorProto, helper

    _check_decoder_kind(m)
    g = GraphBuilder("whisper_encoder")
    d, L, H = dims.n_audio_state, dims.n_text_layer, dims.n_text_head
    dh = dims.n_text_state // H
    x = "mel"
    for name, stride in (("conv1", 1), ("conv2", 2)):
        w, b = g.const(m.f32(f"encoder/{name}/weight")), g.const(m.f32(f"encoder/{name}/bias"))
        x = g.gelu(g.op("Conv", [x, w, b], name, pads=[1, 1], strides=[stride]))
    x = g.transpose(x, [0, 2, 1])  # [1, P, d]
    n_pos = g.op("Slice", [g.op("Shape", [x]), g.const([1]), g.const([2])], "n_positions")
    table = g.const(m.f32("encoder/position_encodings/encodings"), "encoder.positions")  # [1500, d]
    x = g.op("Add", [x, g.op("Slice", [table, g.const([0]), n_pos, g.const([0])], "positions")])
    for i in range(dims.n_audio_layer):
        x = _encoder_block(g, m, x, i, dims.n_audio_head, d, attention_chunks)
    x = _ln(g, m, x, "encoder")
    # All decoder layers' cross K/V in one GEMM: [1, P, L * 2 * d] -> [P, L, 2, H, dh].
    w = np.concatenate([m.f32(f"decoder/layer_{i}/attention/linear_1/weight") for i in range(L)])
    b = np.concatenate([m.f32(f"decoder/layer_{i}/attention/linear_1/bias") for i in range(L)])
    kv = g.reshape(g.linear(x, w.T, b, "cross_kv"), [-1, L, 2, H, dh])
    k, v = g.op("Split", [kv, g.const([1, 1])], "cross_split", n_out=2, axis=2)
    g.op("Transpose", [k], "cross_k", perm=[1, 2, 3, 4, 0])  # [L, 1, H, dh, P]
    g.op("Transpose", [v], "cross_v", perm=[1, 2, 3, 0, 4])  # [L, 1, H, P, dh]
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("mel", f32, [1, dims.n_mels, "frames"])]
    outputs = [
        helper.make_tensor_value_info("cross_k", f32, [L, 1, H, dh, "positions"]),
        helper.make_tensor_value_info("cross_v", f32, [L, 1, H, "positions", dh]),
    ]
    return g.model(inputs, outputs, doc="Whisper encoder + cross-attention K/V; see edge_rt/build/export/whisper_graphs.py")


def _decoder_self_attention(g: GraphBuilder, m: Ct2Model, h: str, i: int, mask: str, H: int, d: int):
    """Self-attention of one step over the masked cache plus the step itself; returns (out, k, v)."""
    p = f"decoder/layer_{i}/self_attention"
    dh = d // H
    qkv = _lin(g, m, h, f"{p}/linear_0", dh**-0.5, d)
    q, k, v = g.op("Split", [qkv, g.const([d, d, d])], f"{p}.split", n_out=3, axis=2)
    q, k4, v4 = (g.reshape(t, [-1, H, 1, dh]) for t in (q, k, v))  # one position: no transpose needed
    past = g.op("Add", [g.op("MatMul", [q, f"self_k_{i}"]), mask])  # [B, H, 1, 448]
    now = g.op("ReduceSum", [g.op("Mul", [q, k4]), g.const([-1])], keepdims=1)  # [B, H, 1, 1]
    att = g.op("Softmax", [g.op("Concat", [past, now], axis=-1)], axis=-1)
    a_past, a_now = g.op("Split", [att, g.const([MAX_TEXT_CTX, 1])], f"{p}.att_split", n_out=2, axis=-1)
    o = g.op("Add", [g.op("MatMul", [a_past, f"self_v_{i}"]), g.op("Mul", [a_now, v4])])
    o = _lin(g, m, g.reshape(o, [-1, 1, d]), f"{p}/linear_1")
    return o, g.reshape(k, [1, -1, H, dh]), g.reshape(v, [1, -1, H, dh])


def _decoder_cross_attention(g: GraphBuilder, m: Ct2Model, h: str, i: int, H: int, d: int) -> str:
    p = f"decoder/layer_{i}/attention"
    dh = d // H
    q = g.reshape(_lin(g, m, h, f"{p}/linear_0", dh**-0.5, d), [-1, H, 1, dh])
    att = g.op("Softmax", [g.op("MatMul", [q, f"cross_k_{i}"])], axis=-1)  # [B, H, 1, P]: the audio is shared
    o = g.reshape(g.op("MatMul", [att, f"cross_v_{i}"]), [-1, 1, d])
    return _lin(g, m, o, f"{p}/linear_2")


def decoder_graph(m: Ct2Model, dims: WhisperDims):
    """The one-step decoder as an ``onnx.ModelProto`` (see module doc)."""
    from onnx import TensorProto, helper

    _check_decoder_kind(m)
    if dims.n_text_ctx != MAX_TEXT_CTX:
        raise Ct2FormatError(f"decoder has {dims.n_text_ctx} positions; edge_rt's cache is {MAX_TEXT_CTX}")
    g = GraphBuilder("whisper_decoder")
    d, L, H, T = dims.n_text_state, dims.n_text_layer, dims.n_text_head, MAX_TEXT_CTX
    dh = d // H
    emb = g.const(m.f32("decoder/embeddings/weight"), "decoder.embeddings")  # [V, d], shared with the output
    x = g.op("Gather", [emb, "tokens"], "token_embedding")  # [B, 1, d]
    positions = g.const(m.f32("decoder/position_encodings/encodings"), "decoder.positions")  # [448, d]
    x = g.op("Add", [x, g.op("Gather", [positions, "offset"], axis=0)])
    valid = g.op("Less", [g.const(np.arange(T)), "offset"], "cache_valid")  # [448] bool
    mask = g.op("Where", [valid, g.const(np.float32(0.0)), g.const(np.float32(MASKED))], "cache_mask")
    new_k, new_v = [], []
    for i in range(L):
        p = f"decoder/layer_{i}"
        o, k, v = _decoder_self_attention(g, m, _ln(g, m, x, f"{p}/self_attention"), i, mask, H, d)
        new_k.append(k)
        new_v.append(v)
        x = g.op("Add", [x, o])
        x = g.op("Add", [x, _decoder_cross_attention(g, m, _ln(g, m, x, f"{p}/attention"), i, H, d)])
        x = g.op("Add", [x, _ffn(g, m, x, f"{p}/ffn")])
    x = _ln(g, m, x, "decoder")
    g.op("Gemm", [g.reshape(x, [-1, d]), emb], "logits", transB=1)  # tied output projection
    g.op("Concat", new_k, "new_k", axis=0)
    g.op("Concat", new_v, "new_v", axis=0)
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    B = BEAMS
    inputs = [helper.make_tensor_value_info("tokens", i64, [B, 1]), helper.make_tensor_value_info("offset", i64, [1])]
    for i in range(L):
        inputs += [
            helper.make_tensor_value_info(f"self_k_{i}", f32, [B, H, dh, T]),
            helper.make_tensor_value_info(f"self_v_{i}", f32, [B, H, T, dh]),
            helper.make_tensor_value_info(f"cross_k_{i}", f32, [1, H, dh, "positions"]),
            helper.make_tensor_value_info(f"cross_v_{i}", f32, [1, H, "positions", dh]),
        ]
    outputs = [
        helper.make_tensor_value_info("logits", f32, [B, dims.n_vocab]),
        helper.make_tensor_value_info("new_k", f32, [L, B, H, dh]),
        helper.make_tensor_value_info("new_v", f32, [L, B, H, dh]),
    ]
    doc = "Whisper one-step decoder over `beams` sequences, fixed 448-position cache; see edge_rt/build/export/whisper_graphs.py"
    return g.model(inputs, outputs, doc=doc)
