"""TimestampRules (OpenAI Whisper's ApplyTimestampRules) on hand-made logits: which tokens stay allowed."""

from __future__ import annotations

import numpy as np

from edge_rt.stages.asr.decoding import TimestampRules

EOT, NO_TS, BEGIN, N_VOCAB = 50257, 50363, 50364, 51865
RULES = TimestampRules(BEGIN, NO_TS, EOT)


def _allowed(sampled, text_bias: float = 0.0) -> np.ndarray:
    logits = np.zeros(N_VOCAB, np.float32)
    logits[:BEGIN] += text_bias
    RULES.apply(logits, sampled)
    return np.isfinite(logits)


def test_the_text_starts_with_a_timestamp_within_the_first_second():
    ok = _allowed([], text_bias=20.0)  # even when a text token is far more likely
    assert not ok[:BEGIN].any() and not ok[NO_TS]
    assert ok[BEGIN : BEGIN + 51].all() and not ok[BEGIN + 51 :].any()  # <|0.00|> .. <|1.00|>


def test_a_segment_end_is_followed_by_a_timestamp_or_the_end_and_time_never_goes_back():
    ok = _allowed([BEGIN + 10, 400, 500, BEGIN + 80], text_bias=20.0)  # <|0.20|> text <|1.60|>
    assert not ok[:EOT].any() and ok[EOT]
    assert not ok[BEGIN : BEGIN + 80].any() and ok[BEGIN + 80 :].all()  # the next start may equal the end


def test_after_a_pair_text_follows_and_inside_a_segment_time_moves_forward():
    ok = _allowed([BEGIN + 10, 400, BEGIN + 80, BEGIN + 80], text_bias=20.0)
    assert ok[:EOT].all() and not ok[BEGIN:].any()
    ok = _allowed([BEGIN + 10, 400], text_bias=-20.0)  # inside a segment: timestamps dominate, text is masked
    assert not ok[:BEGIN].any() and not ok[BEGIN : BEGIN + 11].any() and ok[BEGIN + 11 :].all()


def test_text_stays_allowed_where_it_is_likelier_than_every_timestamp_together():
    ok = _allowed([BEGIN, 400], text_bias=20.0)
    assert ok[:EOT].all() and ok[BEGIN + 1 :].all() and not ok[BEGIN]


def test_segments_end_by_the_end_of_the_audio():
    rules = TimestampRules(BEGIN, NO_TS, EOT, last=100)  # 2.00 s of audio in the window
    for sampled, allowed in (
        ([], range(BEGIN, BEGIN + 51)),  # a start within the first second
        ([BEGIN + 10, 400], range(BEGIN + 11, BEGIN + 101)),  # a segment's end: by 2.00 s
        ([BEGIN + 10, 400, BEGIN + 90], range(BEGIN + 90, BEGIN + 100)),  # the next start leaves room for an end
        ([BEGIN + 10, 400, BEGIN + 100], ()),  # ended at the end: only <|endoftext|>
    ):
        logits = np.zeros(N_VOCAB, np.float32)
        rules.apply(logits, sampled)
        stamps = np.flatnonzero(np.isfinite(logits[BEGIN:])) + BEGIN
        assert list(stamps) == list(allowed), sampled
    logits = np.zeros(N_VOCAB, np.float32)
    rules.apply(logits, [BEGIN + 10, 400, BEGIN + 100])
    ok = np.isfinite(logits)
    assert ok[EOT] and not ok[:EOT].any() and not ok[BEGIN:].any()  # no text, no timestamp: the end
