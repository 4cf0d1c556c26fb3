"""One translation direction of a Marian student: SentencePiece + encoder + greedy one-step decoder.

Decoding follows Bergamot's config for the tiny11 students: beam 1 (greedy), at most
``max_length_factor x source length`` target tokens, ``<unk>`` never produced
(Marian's ``allow-unk: false``), optional lexical shortlist (``lex.50.50``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_rt.backends.base import BoundRun, Engine, select_bucket
from edge_rt.stages.mt import marian_io as io
from edge_rt.stages.mt.shortlist import LexicalShortlist


def _load_spm(path: Path):
    try:
        import sentencepiece
    except ImportError as e:  # pragma: no cover - dependency of the package
        raise ImportError("the MT stage needs SentencePiece: `pip install sentencepiece`") from e
    return sentencepiece.SentencePieceProcessor(model_file=str(path))


class _SourceBucket:
    """The encoder's buffers at one source length ``S``, bound once; the decoder reads them in place."""

    def __init__(self, encoder: Engine, size: int):
        L, H, Dh = io.DEC_LAYERS, io.HEADS, io.HEAD_DIM
        self.ids = np.zeros((1, size), np.int64)
        self.mask = np.zeros((1, size), np.float32)
        self.cross_k = np.zeros((L, 1, H, Dh, size), np.float32)
        self.cross_v = np.zeros((L, 1, H, size, Dh), np.float32)
        # Nothing is read on the host: cross K/V only feed the decoder.
        self.encode = encoder.bind({"src_ids": self.ids, "src_mask": self.mask},
                                   {"cross_k": self.cross_k, "cross_v": self.cross_v}, host_outputs=())


class MarianDirection:
    """Translate single sentences ``src -> tgt`` with two engines that follow :mod:`marian_io`.

    Args:
        encoder, decoder: the pair's graphs.
        vocab: the SentencePiece model (source and target share it).
        buckets: static source lengths, increasing; inputs are padded to the next one.
        max_length_factor: target tokens allowed per source token (incl. ``</s>``).
        shortlist: restrict each sentence's output vocabulary, or ``None`` for all of it.

    Every engine step runs on bound, static buffers: the encoder once per source bucket ``S``,
    the decoder once per (``S``, vocabulary bucket ``K`` of :func:`marian_io.vocab_buckets`),
    reading the encoder's cross K/V and mask buffers in place. The SSRU state is
    ``device_resident`` (the backend carries ``state_out`` into ``state``); only the logits
    come back to the host. Buffers are allocated here; decoder steps are bound the first time
    a (source, vocabulary) bucket pair is used. :meth:`greedy` allocates nothing per token.
    """

    def __init__(self, encoder: Engine, decoder: Engine, vocab: Path, buckets: tuple[int, ...],
                 max_length_factor: float, shortlist: LexicalShortlist | None = None):
        self._enc = encoder
        self._dec = decoder
        self._sp = _load_spm(vocab)
        self.buckets = tuple(buckets)
        self.max_length_factor = float(max_length_factor)
        self._shortlist = shortlist
        self._unk = self._sp.unk_id()
        eos = self._sp.piece_to_id("</s>")
        if eos != io.EOS_ID:
            raise ValueError(f"{vocab} maps '</s>' to id {eos}, the Marian graphs expect {io.EOS_ID}")
        self._src = {s: _SourceBucket(encoder, s) for s in self.buckets}
        self._state = np.zeros((io.DEC_LAYERS, 1, io.DIM), np.float32)
        self._state_out = np.zeros_like(self._state)
        self._prev = np.zeros((1,), np.int64)
        self._pos = np.zeros((1,), np.int64)
        vocab_size = self._sp.get_piece_size()
        self.vocab_buckets = io.vocab_buckets(vocab_size)
        # vocab_ids per K, padded with </s>; without a shortlist: every id but <unk> (Marian's allow-unk: false).
        self._vocab = {k: np.full((k,), io.EOS_ID, np.int64) for k in self.vocab_buckets}
        self._logits = {k: np.zeros((1, k), np.float32) for k in self.vocab_buckets}
        self._all_ids = np.delete(np.arange(vocab_size, dtype=np.int64), self._unk)
        self._steps: dict[tuple[int, int], BoundRun] = {}

    @property
    def max_tokens(self) -> int:
        """Source pieces per encoder call (the largest bucket minus ``</s>``)."""
        return self.buckets[-1] - 1

    def encode(self, text: str) -> list[int]:
        """SentencePiece ids of ``text`` (no ``</s>``)."""
        return self._sp.encode(text)

    def translate(self, text: str) -> str:
        """Translate one sentence; sentences longer than :attr:`max_tokens` pieces go in chunks."""
        ids = self.encode(text)
        if not ids:
            return ""
        n = self.max_tokens
        chunks = [ids[i : i + n] for i in range(0, len(ids), n)]
        return " ".join(self._sp.decode(self.greedy(c)) for c in chunks)

    def bucket_for(self, length: int) -> int:
        """The smallest bucket holding ``length`` ids (``</s>`` included)."""
        for s in self.buckets:
            if length <= s:
                return s
        raise ValueError(f"{length} source ids exceed the largest bucket {self.buckets[-1]}; split the input")

    def _decoder(self, size: int, k: int) -> BoundRun:
        """The decoder step bound to source bucket ``size`` and vocabulary bucket ``k``."""
        step = self._steps.get((size, k))
        if step is None:
            src = self._src[size]
            feeds = {"prev_token": self._prev, "position": self._pos, "cross_k": src.cross_k,
                     "cross_v": src.cross_v, "src_mask": src.mask, "state": self._state, "vocab_ids": self._vocab[k]}
            step = self._dec.bind(feeds, {"logits": self._logits[k], "state_out": self._state_out},
                                  device_resident={"state": "state_out"}, host_outputs=("logits",))
            self._steps[(size, k)] = step
        return step

    def _fill_vocab(self, src: list[int]) -> int:
        """Write this sentence's target ids into the smallest vocabulary bucket that holds them; returns K."""
        allowed = self._all_ids if self._shortlist is None else self._shortlist.allowed(src, exclude=(self._unk,))
        k = select_bucket(allowed.size, self.vocab_buckets)  # the last bucket holds every id
        vocab = self._vocab[k]
        vocab[: allowed.size] = allowed
        vocab[allowed.size :] = io.EOS_ID
        return k

    def greedy(self, src_pieces: list[int], bucket: int | None = None) -> list[int]:
        """Greedy target ids (without ``</s>``) for source ids ``src_pieces`` (without ``</s>``).

        Args:
            bucket: force a source length (must hold the ids); default the smallest that fits.
        """
        src = list(src_pieces) + [io.EOS_ID]
        n = len(src)
        size = self.bucket_for(n) if bucket is None else bucket
        if size not in self._src or n > size:
            raise ValueError(f"bucket {size} cannot hold {n} ids; buckets: {self.buckets}")
        buf = self._src[size]
        buf.ids.fill(0)
        buf.mask.fill(0.0)
        buf.ids[0, :n] = src
        buf.mask[0, :n] = 1.0
        buf.encode.run()

        k = self._fill_vocab(src)
        vocab, logits = self._vocab[k], self._logits[k][0]
        step = self._decoder(size, k)
        step.reset_state()
        self._prev[0] = io.START_TOKEN
        out: list[int] = []
        for t in range(int(self.max_length_factor * n)):
            self._pos[0] = t
            step.run()
            # argmax returns the first maximum, so </s> padding never shadows a real id.
            token = int(vocab[np.argmax(logits)])
            if token == io.EOS_ID:
                break
            out.append(token)
            self._prev[0] = token
        return out
