"""Marian's binary lexical shortlist (``lex.50.50.*.s2t.bin``): which target ids a sentence may use.

File layout (little-endian, Marian ``BinaryShortlistGenerator``)::

    u64 magic 0xF11A48D5013417F5, u64 checksum, u64 firstNum, u64 bestNum,
    u64 wordToOffsetSize (= source vocab + 1), u64 shortListsSize
    u64 wordToOffset[wordToOffsetSize]     # CSR offsets per source id
    u32 shortLists[shortListsSize]         # best target ids of each source id

For a sentence Marian allows: target ids ``0 .. firstNum-1`` (the most frequent pieces,
``</s>`` included), the listed translations of every source id, and, because the
Bergamot students share one vocabulary, the source ids themselves.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = 0xF11A48D5013417F5
_HEADER = struct.Struct("<6Q")


@dataclass(frozen=True)
class LexicalShortlist:
    """A loaded shortlist. ``offsets``: uint64 ``[src_vocab + 1]``; ``targets``: uint32 ``[n]``."""

    first_num: int
    best_num: int
    offsets: np.ndarray
    targets: np.ndarray
    shared_vocab: bool = True  # the Bergamot students use one SentencePiece model for both sides

    @classmethod
    def load(cls, path: str | Path) -> "LexicalShortlist":
        """Read a binary shortlist; raises ``ValueError`` naming the problem if it is not one."""
        path = Path(path)
        buf = path.read_bytes()
        if len(buf) < _HEADER.size:
            raise ValueError(f"{path} is too short ({len(buf)} bytes) to be a Marian binary shortlist")
        magic, _checksum, first, best, n_offsets, n_targets = _HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            raise ValueError(
                f"{path} is not a Marian binary shortlist (magic 0x{magic:x}); text shortlists (lex.s2t.gz) "
                f"must be converted with `marian-conv --shortlist`"
            )
        expected = _HEADER.size + 8 * n_offsets + 4 * n_targets
        if len(buf) != expected:
            raise ValueError(f"{path} has {len(buf)} bytes, its header promises {expected}: the file is truncated")
        offsets = np.frombuffer(buf, dtype="<u8", count=n_offsets, offset=_HEADER.size)
        targets = np.frombuffer(buf, dtype="<u4", count=n_targets, offset=_HEADER.size + 8 * n_offsets)
        return cls(first_num=int(first), best_num=int(best), offsets=offsets, targets=targets)

    def allowed(self, src_ids: np.ndarray | list[int], exclude: tuple[int, ...] = ()) -> np.ndarray:
        """Sorted unique int64 target ids a sentence with source ids ``src_ids`` may produce.

        Args:
            src_ids: the source ids fed to the encoder (without padding).
            exclude: ids to drop (e.g. ``<unk>``, which Marian never outputs).
        """
        src = np.unique(np.asarray(src_ids, dtype=np.int64))
        if src.size and (src.min() < 0 or src.max() >= self.offsets.size - 1):
            raise ValueError(f"source ids must lie in [0, {self.offsets.size - 1}), got {src.min()}..{src.max()}")
        parts = [np.arange(self.first_num, dtype=np.int64)]
        if self.shared_vocab:
            parts.append(src)
        for i in src:
            parts.append(self.targets[int(self.offsets[i]) : int(self.offsets[i + 1])].astype(np.int64))
        ids = np.unique(np.concatenate(parts))
        if exclude:
            ids = ids[~np.isin(ids, np.asarray(exclude, dtype=np.int64))]
        return ids
