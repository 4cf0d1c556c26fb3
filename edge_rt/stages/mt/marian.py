"""One translation direction of a Marian student: SentencePiece + encoder + greedy one-step decoder.

Decoding follows Bergamot's config for the tiny11 students: beam 1 (greedy), at most
``max_length_factor x source length`` target tokens, ``<unk>`` never produced
(Marian's ``allow-unk: false``), optional lexical shortlist (``lex.50.50``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_rt.backends.base import Engine
from edge_rt.stages.mt import marian_io as io
from edge_rt.stages.mt.shortlist import LexicalShortlist


def _load_spm(path: Path):
    try:
        import sentencepiece
    except ImportError as e:  # pragma: no cover - dependency of the package
        raise ImportError("the MT stage needs SentencePiece: `pip install sentencepiece`") from e
    return sentencepiece.SentencePieceProcessor(model_file=str(path))


def _round_up(n: int) -> int:
    return -(-n // io.VOCAB_PAD) * io.VOCAB_PAD


class MarianDirection:
    """Translate single sentences ``src -> tgt`` with two engines that follow :mod:`marian_io`.

    Args:
        encoder, decoder: the pair's graphs.
        vocab: the SentencePiece model (source and target share it).
        buckets: static source lengths, increasing; inputs are padded to the next one.
        max_length_factor: target tokens allowed per source token (incl. ``</s>``).
        shortlist: restrict each sentence's output vocabulary, or ``None`` for all of it.

    Buffers (ids, masks per bucket, SSRU state) are allocated here once; a call to
    :meth:`translate` only fills them.
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
        self._ids = {s: np.zeros((1, s), np.int64) for s in self.buckets}
        self._mask = {s: np.zeros((1, s), np.float32) for s in self.buckets}
        self._state = np.zeros((io.DEC_LAYERS, 1, io.DIM), np.float32)
        self._prev = np.zeros((1,), np.int64)
        self._pos = np.zeros((1,), np.int64)
        vocab_size = self._sp.get_piece_size()
        # The ids the decoder scores; without a shortlist all of them but <unk>
        # (Marian's allow-unk: false), padded with </s>.
        self._all_ids = self._padded(np.delete(np.arange(vocab_size, dtype=np.int64), self._unk))
        self._vocab_buf = np.zeros((_round_up(vocab_size),), np.int64)

    @staticmethod
    def _padded(ids: np.ndarray) -> np.ndarray:
        """``ids`` followed by </s> up to a multiple of :data:`marian_io.VOCAB_PAD`."""
        out = np.full((_round_up(ids.size),), io.EOS_ID, np.int64)
        out[: ids.size] = ids
        return out

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

    def greedy(self, src_pieces: list[int], bucket: int | None = None) -> list[int]:
        """Greedy target ids (without ``</s>``) for source ids ``src_pieces`` (without ``</s>``).

        Args:
            bucket: force a source length (must hold the ids); default the smallest that fits.
        """
        src = list(src_pieces) + [io.EOS_ID]
        n = len(src)
        size = self.bucket_for(n) if bucket is None else bucket
        if size not in self._ids or n > size:
            raise ValueError(f"bucket {size} cannot hold {n} ids; buckets: {self.buckets}")
        ids, mask = self._ids[size], self._mask[size]
        ids.fill(0)
        mask.fill(0.0)
        ids[0, :n] = src
        mask[0, :n] = 1.0
        enc = self._enc.run({"src_ids": ids, "src_mask": mask})

        if self._shortlist is None:
            vocab = self._all_ids
        else:
            ids_ = self._padded(self._shortlist.allowed(src, exclude=(self._unk,)))
            vocab = self._vocab_buf[: ids_.size]
            vocab[:] = ids_
        self._state.fill(0.0)
        self._prev[0] = io.START_TOKEN
        feeds = {"prev_token": self._prev, "position": self._pos, "cross_k": enc["cross_k"],
                 "cross_v": enc["cross_v"], "src_mask": mask, "state": self._state, "vocab_ids": vocab}
        out: list[int] = []
        for t in range(int(self.max_length_factor * n)):
            self._pos[0] = t
            res = self._dec.run(feeds)
            # argmax returns the first maximum, so </s> padding never shadows a real id.
            token = int(vocab[np.argmax(res["logits"][0])])
            if token == io.EOS_ID:
                break
            out.append(token)
            np.copyto(self._state, res["state_out"])
            self._prev[0] = token
        return out
