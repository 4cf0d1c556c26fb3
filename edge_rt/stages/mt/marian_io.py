"""The I/O contract of the Marian (Bergamot tiny11) ONNX graphs, shared by export and runtime.

Two graphs per language pair, batch 1, float32 activations:

**Encoder** ``marian_<pair>_encoder.onnx`` (``S`` = a source bucket from :data:`SRC_BUCKETS`)

=============  =======  ==================  ==========================================
name           dtype    shape               meaning
=============  =======  ==================  ==========================================
``src_ids``    int64    ``[1, S]``          SentencePiece ids + ``</s>`` (id 0), padded
``src_mask``   float32  ``[1, S]``          1.0 on real tokens, 0.0 on padding
``cross_k``    float32  ``[L, 1, H, Dh, S]`` per decoder layer: context-attention keys, transposed
``cross_v``    float32  ``[L, 1, H, S, Dh]`` per decoder layer: context-attention values
=============  =======  ==================  ==========================================

**Decoder step** ``marian_<pair>_decoder.onnx``: one greedy step, the SSRU state carried outside.

=============  =======  ==================  ==========================================
``prev_token`` int64    ``[1]``             previous target id; :data:`START_TOKEN` at step 0
``position``   int64    ``[1]``             target position (0 at the first step)
``cross_k``    float32  ``[L, 1, H, Dh, S]`` from the encoder
``cross_v``    float32  ``[L, 1, H, S, Dh]`` from the encoder
``src_mask``   float32  ``[1, S]``          as given to the encoder
``state``      float32  ``[L, 1, D]``       SSRU cell state per decoder layer (zeros at step 0)
``vocab_ids``  int64    ``[K]``             target ids to score (shortlist, or all V ids), K padded
``logits``     float32  ``[1, K]``          unnormalised scores of ``vocab_ids``
``state_out``  float32  ``[L, 1, D]``       next SSRU cell state
=============  =======  ==================  ==========================================

Two dimensions are not fixed in the graph, but the runtime only ever uses fixed buckets
(one bound engine step per shape, one TensorRT profile per shape): ``S`` (ONNX dim
:data:`SRC_LEN_DIM`) takes the lengths of :data:`SRC_BUCKETS`, and ``K`` (:data:`VOCAB_LEN_DIM`)
the lengths :func:`vocab_buckets` gives (:data:`VOCAB_BUCKETS` below ``V``, then ``V`` itself
for the whole vocabulary). Padding never changes the result: padded source keys get a -1e9
attention bias, and ``vocab_ids`` is padded by repeating ``</s>`` (id 0, which every id list
holds at index 0; ties resolve to the first occurrence, and a padded slot maps to ``</s>``
anyway). ``V`` = 32000 for the tiny11 students.
"""

from __future__ import annotations

# Architecture of the tiny11 students (checked against the model's embedded model.yml).
DIM = 256  # D: embedding / model width
HEADS = 8  # H
HEAD_DIM = DIM // HEADS  # Dh = 32
DEC_LAYERS = 2  # L: SSRU decoder layers
ENC_LAYERS = 6

EOS_ID = 0  # "</s>" in the Bergamot SentencePiece vocabularies
START_TOKEN = -1  # prev_token at step 0: Marian starts from an all-zero embedding
SRC_BUCKETS = (16, 32, 64, 128, 256)  # static source lengths in tokens (incl. </s>)
SRC_LEN_DIM = "src_len"
VOCAB_LEN_DIM = "vocab_len"
# vocab_ids lengths K below V. Measured on calibration/sentences_{en,pt}.txt (7-15 source pieces) the
# lex.50.50 shortlists allow 299-631 ids, and a CPU decoder step costs the same up to K = 768 and
# ~1.4x at 1024; a shortlist never allows more than first + (best + 1) x S ids (13106 at S = 256).
VOCAB_BUCKETS = (512, 768, 1024, 1536, 2048, 3072, 4096, 8192, 16384)

# The tied embedding matrix [V, D] float32 (31 MB): both graphs of a pair store it under this name, byte for
# byte, so the runtime hands one copy to both sessions (EngineFactory.load(shared=...)).
TIED_EMBEDDING = "Wemb"

ENC_INPUTS = ("src_ids", "src_mask")
ENC_OUTPUTS = ("cross_k", "cross_v")
DEC_INPUTS = ("prev_token", "position", "cross_k", "cross_v", "src_mask", "state", "vocab_ids")
DEC_OUTPUTS = ("logits", "state_out")


def vocab_buckets(vocab_size: int) -> tuple[int, ...]:
    """The ``vocab_ids`` lengths used with a ``vocab_size``-piece vocabulary: the
    :data:`VOCAB_BUCKETS` below it, then ``vocab_size`` (every id but ``<unk>``, one ``</s>`` pad)."""
    if vocab_size < 2:
        raise ValueError(f"a Marian vocabulary has at least </s> and <unk>, not {vocab_size} pieces")
    return (*(k for k in VOCAB_BUCKETS if k < vocab_size), int(vocab_size))
