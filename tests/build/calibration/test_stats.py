"""The gate's paired statistics: a pure function of the per-utterance counts, and its decision rule."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.build.calibration.gate import GateResult, word_edits
from edge_rt.build.calibration.stats import accepts, paired_ratio, screen_rejects


def _counts(n=240, extra_every=0, seed=3):
    """``n`` utterances of 8-10 words, FP32 errors ~5 %; INT8 adds one error every ``extra_every`` utterances."""
    rng = np.random.default_rng(seed)
    words = rng.integers(8, 11, n)
    e32 = rng.binomial(words, 0.05)
    e8 = e32.copy()
    if extra_every:
        e8[::extra_every] += 1
    return e32, e8, words


def test_same_counts_same_interval_and_point_values():
    e32, e8, words = _counts(extra_every=6)
    a, b = paired_ratio(e32, e8, words), paired_ratio(e32.tolist(), e8.tolist(), words.tolist())
    assert a == b  # fixed seed: bit-identical interval from the same measurements
    assert a.fp32 == pytest.approx(e32.sum() / words.sum()) and a.int8 == pytest.approx(e8.sum() / words.sum())
    assert a.low < a.delta < a.high and a.items == 240 and a.total == int(words.sum())
    assert a.as_dict()["words"] == int(words.sum()) and a.as_dict()["bootstrap"]["seed"]


def test_identical_decodes_give_a_zero_interval_and_pass():
    e32, _, words = _counts()
    r = paired_ratio(e32, e32, words)
    assert r.delta == r.low == r.high == 0.0 and accepts(r, 0.01) and not screen_rejects(r, 0.01)


def test_rule_needs_the_upper_end_below_the_limit():
    # 40 extra errors in ~2,160 words: delta ~1.85 pt, clearly above a 1-pt limit -> rejected, even by the screen.
    e32, e8, words = _counts(extra_every=6)
    bad = paired_ratio(e32, e8, words)
    assert bad.low > 0.01 and not accepts(bad, 0.01) and screen_rejects(bad, 0.01)
    # ~0.5 pt worse: point estimate under 1 pt, upper end too -> accepted.
    e32, e8, words = _counts(extra_every=20)
    ok = paired_ratio(e32, e8, words)
    assert ok.delta < ok.high <= 0.01 and accepts(ok, 0.01)
    # The same 0.5-pt cost on a tenth of the words: the interval is wide, its upper end passes the limit:
    # the rule refuses what too few words cannot show, while the screen keeps it for the full set.
    e32, e8, words = _counts(n=24, extra_every=20)
    few = paired_ratio(e32, e8, words)
    assert few.delta <= 0.01 < few.high and not accepts(few, 0.01) and not screen_rejects(few, 0.01)


def test_more_words_narrow_the_interval():
    widths = [paired_ratio(*_counts(n=n, extra_every=10)).high - paired_ratio(*_counts(n=n, extra_every=10)).low
              for n in (24, 240, 2400)]
    assert widths[0] > widths[1] > widths[2]


def test_bad_input_is_a_named_error():
    with pytest.raises(ValueError, match="one length"):
        paired_ratio([1, 2], [1], [5, 5])
    with pytest.raises(ValueError, match="positive total"):
        paired_ratio([], [], [])


def test_gate_result_applies_the_rule_and_records_the_interval():
    e32, e8, words = _counts(extra_every=20)
    r = paired_ratio(e32, e8, words)
    full = GateResult("asr", "WER", r.fp32, r.int8, 0.01, r.items, "x", r, "upper95")
    d = full.as_dict()
    assert full.passed and d["words"] == int(words.sum()) and d["ci95"][0] <= d["delta"] <= d["ci95"][1]
    tight = GateResult("asr", "WER", r.fp32, r.int8, r.high - 1e-4, r.items, "x", r, "upper95")
    assert tight.delta < tight.limit and not tight.passed  # point under the limit, upper end over it: refused
    assert GateResult("asr", "WER", r.fp32, r.int8, r.high - 1e-4, r.items, "x", r, "screen").passed


def test_word_edits_per_utterance_match_the_corpus_wer():
    from edge_rt.measure.scoring import wer

    refs = ["Where is the nearest train station?", "I would like a table for two, please."]
    hyps = ["where is the nearest train", "I would like a cable for two please and"]
    edits, words = word_edits(refs, hyps)
    assert edits.tolist() == [1, 2] and words.tolist() == [6, 8]
    assert edits.sum() / words.sum() == pytest.approx(wer(refs, hyps))
