"""MarianDirection on bound buffers: no allocating run(), fixed vocabulary buckets, state reset per sentence."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from edge_rt.backends.ort import OrtEngine, SessionOptions
from edge_rt.stages.mt import marian_io as io
from edge_rt.stages.mt.marian import MarianDirection
from edge_rt.stages.mt.shortlist import LexicalShortlist

SENTENCES = ["Where is the nearest train station?", "Could you speak a little more slowly, please?",
             "I would like to book a table for two people at eight o'clock."]


class BindOnly:
    """An engine that, like the TensorRT runner, refuses the allocating run() and records bind() shapes."""

    def __init__(self, engine):
        self._engine, self.bound = engine, []
        self.input_names, self.output_names = engine.input_names, engine.output_names

    def run(self, inputs):
        raise AssertionError("a stage called the allocating Engine.run()")

    def bind(self, inputs, outputs, **carry):
        self.bound.append(({k: v.shape for k, v in inputs.items()}, carry))
        return self._engine.bind(inputs, outputs, **carry)


def _direction(pack, pair="en-pt", shortlist=True, wrap=lambda e: e) -> MarianDirection:
    so = SessionOptions(intra_op_threads=1)
    entry = pack.stage("mt")
    return MarianDirection(wrap(OrtEngine(pack.model("mt", f"{pair}/encoder"), so)),
                           wrap(OrtEngine(pack.model("mt", f"{pair}/decoder"), so)),
                           pack.asset("mt", f"{pair}/vocab"), tuple(entry["src_buckets"]),
                           float(entry["max_length_factor"]),
                           LexicalShortlist.load(pack.asset("mt", f"{pair}/shortlist")) if shortlist else None)


def _reference_greedy(d: MarianDirection, pieces: list[int]) -> list[int]:
    """Greedy decoding with the allocating run(), exact vocabulary (no bucket padding), state copied on the host."""
    src = list(pieces) + [io.EOS_ID]
    size = d.bucket_for(len(src))
    ids = np.zeros((1, size), np.int64)
    mask = np.zeros((1, size), np.float32)
    ids[0, : len(src)], mask[0, : len(src)] = src, 1.0
    kv = d._enc.run({"src_ids": ids, "src_mask": mask})
    vocab = d._shortlist.allowed(src, exclude=(d._unk,))
    state, out = np.zeros((io.DEC_LAYERS, 1, io.DIM), np.float32), []
    prev = io.START_TOKEN
    for t in range(int(d.max_length_factor * len(src))):
        res = d._dec.run({"prev_token": np.array([prev]), "position": np.array([t]), "src_mask": mask,
                          "state": state, "vocab_ids": vocab, **kv})
        token = int(vocab[np.argmax(res["logits"][0])])
        if token == io.EOS_ID:
            break
        out.append(token)
        state, prev = res["state_out"], token
    return out


@pytest.fixture(scope="module")
def direction(tiny_pack) -> MarianDirection:
    return _direction(tiny_pack)


@pytest.mark.slow
def test_bound_decoding_equals_unpadded_allocating_decoding(direction):
    for s in SENTENCES:
        pieces = direction.encode(s)
        assert direction.greedy(pieces) == _reference_greedy(direction, pieces), s


@pytest.mark.slow
def test_only_bound_steps_run_with_fixed_shapes_and_resident_state(tiny_pack):
    engines = []

    def wrap(e):
        engines.append(BindOnly(e))
        return engines[-1]

    d = _direction(tiny_pack, wrap=wrap)
    for s in SENTENCES:
        assert d.translate(s)
    enc, dec = engines
    assert sorted(shapes["src_ids"][1] for shapes, _ in enc.bound) == sorted(d.buckets)
    for shapes, carry in dec.bound:
        assert shapes["vocab_ids"][0] in d.vocab_buckets and shapes["src_mask"][1] in d.buckets
        assert carry == {"device_resident": {"state": "state_out"}, "host_outputs": ("logits",)}
    n_bound = len(dec.bound)
    for s in SENTENCES:  # bound once per (source, vocabulary) bucket pair, then reused
        d.translate(s)
    assert len(dec.bound) == n_bound


@pytest.mark.slow
def test_state_starts_from_zero_for_every_sentence(direction):
    a, b = (direction.encode(s) for s in SENTENCES[:2])
    first = direction.greedy(a)
    direction.greedy(b)
    assert direction.greedy(a) == first


@pytest.mark.slow
def test_whole_vocabulary_without_shortlist(tiny_pack):
    d = _direction(tiny_pack, shortlist=False)
    assert d.translate(SENTENCES[0])
    assert set(d._steps) == {(16, d.vocab_buckets[-1])}  # every id but <unk>: the V bucket


@pytest.mark.slow
def test_decoding_steps_allocate_nothing_that_stays(direction):
    pieces = direction.encode(SENTENCES[2])
    direction.greedy(pieces)  # binds this sentence's buckets
    tracemalloc.start()
    try:
        first = tracemalloc.take_snapshot()
        for _ in range(20):
            direction.greedy(pieces)
        last = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = [d for d in last.compare_to(first, "lineno") if d.size_diff > 0 and "/edge_rt/" in d.traceback[0].filename]
    # 20 sentences of ~15 steps: anything kept per step would show as >= 300 blocks.
    assert sum(d.size_diff for d in grown) < 4096, "\n".join(str(d) for d in grown[:10])


@pytest.mark.parametrize("pair,precision", [("en-pt", "int8"), ("pt-en", "int8"), ("en-pt", "fp32")])
def test_one_shared_embedding_translates_token_for_token_as_before(tiny_pack, pair, precision):
    """The pair's encoder and decoder read one tied-embedding array (held once): the greedy ids on the
    calibration sentences are exactly those of sessions that each load the embedding from their own file."""
    from pathlib import Path

    from edge_rt.backends.factory import OrtEngines
    from edge_rt.stages.mt.translator import MtOptions, Translator

    src = pair.split("-")[0]
    sentences = [s for s in (Path(__file__).resolve().parents[3] / "calibration" / f"sentences_{src}.txt")
                 .read_text().splitlines() if s.strip()][:25]
    so = SessionOptions(intra_op_threads=1)
    entry = tiny_pack.stage("mt")
    own = MarianDirection(OrtEngine(tiny_pack.model("mt", f"{pair}/encoder", precision), so),
                          OrtEngine(tiny_pack.model("mt", f"{pair}/decoder", precision), so),
                          tiny_pack.asset("mt", f"{pair}/vocab"), tuple(entry["src_buckets"]),
                          float(entry["max_length_factor"]),
                          LexicalShortlist.load(tiny_pack.asset("mt", f"{pair}/shortlist")))
    shared = Translator.from_pack(tiny_pack, MtOptions(precision=precision, pairs=(pair,)),
                                  engines=OrtEngines(tiny_pack)).direction(*pair.split("-"))
    assert shared._enc.shared_initializers == (io.TIED_EMBEDDING,) and own._enc.shared_initializers == ()
    for s in sentences:
        ids = own.encode(s)
        assert shared.greedy(ids) == own.greedy(ids), s
