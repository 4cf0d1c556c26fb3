import struct

import numpy as np
import pytest

from edge_rt.stages.mt.shortlist import MAGIC, LexicalShortlist


def _write(path, first, lists):
    offsets = np.cumsum([0] + [len(x) for x in lists]).astype("<u8")
    targets = np.array([t for x in lists for t in x], "<u4")
    head = struct.pack("<6Q", MAGIC, 0, first, 2, offsets.size, targets.size)
    path.write_bytes(head + offsets.tobytes() + targets.tobytes())


def test_allowed_ids_are_frequent_plus_translations_plus_source(tmp_path):
    path = tmp_path / "lex.bin"
    _write(path, 3, [[], [], [], [], [10, 11], [12], [11, 13]])  # 7 source ids
    sl = LexicalShortlist.load(path)
    assert sl.allowed([4, 6, 0]).tolist() == [0, 1, 2, 4, 6, 10, 11, 13]
    assert sl.allowed([5], exclude=(1,)).tolist() == [0, 2, 5, 12]
    with pytest.raises(ValueError, match="source ids"):
        sl.allowed([7])


def test_rejects_files_that_are_not_shortlists(tmp_path):
    path = tmp_path / "lex.bin"
    path.write_bytes(b"\0" * 64)
    with pytest.raises(ValueError, match="not a Marian binary shortlist"):
        LexicalShortlist.load(path)
    _write(path, 3, [[1], [2]])
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(ValueError, match="truncated"):
        LexicalShortlist.load(path)
