"""History: the capture (and played) audio by sample index, in a preallocated circular buffer."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.loop.history import History


def test_read_into_wraps_and_fills_what_is_not_stored_with_zeros():
    h = History(8)
    h.write(0, np.arange(1, 13, dtype=np.float32))  # 12 samples in 8 slots: 4..11 are kept
    out = np.full(8, -1.0, np.float32)
    assert h.read_into(6, out) == (6, 12)  # 6..11 (across the wrap), then 12 and 13, not written yet
    assert out.tolist() == [7, 8, 9, 10, 11, 12, 0, 0]
    out = np.full(4, -1.0, np.float32)
    assert h.read_into(2, out) == (4, 6)  # 2 and 3 were overwritten
    assert out.tolist() == [0, 0, 5, 6]
    assert h.read_into(20, out) == (20, 12) and not out.any()  # nothing stored there
    assert np.array_equal(h.slice(4, 12), np.arange(5, 13, dtype=np.float32))


def test_capacity_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        History(6)
