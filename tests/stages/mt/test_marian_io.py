"""The Marian graphs' I/O constants: fixed vocabulary buckets."""

from __future__ import annotations

import pytest

from edge_rt.stages.mt import marian_io as io


def test_vocab_buckets_end_with_the_whole_vocabulary():
    assert io.vocab_buckets(32000) == (*io.VOCAB_BUCKETS, 32000)
    assert io.vocab_buckets(1000) == (512, 768, 1000)
    assert io.vocab_buckets(512) == (512,)  # a bucket equal to V is the whole-vocabulary one
    assert list(io.VOCAB_BUCKETS) == sorted(set(io.VOCAB_BUCKETS))


def test_a_shortlist_of_the_largest_source_bucket_fits_below_the_whole_vocabulary():
    # lex.50.50: first 50 ids + (50 targets + the id itself) per source piece.
    assert 50 + 51 * io.SRC_BUCKETS[-1] <= io.VOCAB_BUCKETS[-1]


def test_a_vocabulary_without_eos_and_unk_is_refused():
    with pytest.raises(ValueError, match="at least"):
        io.vocab_buckets(1)
