"""Paired statistics of a gate: INT8 vs FP32 on the same items, with a bootstrap interval and the decision.

A gate's metric is a ratio of sums over items (WER = edits / reference words over utterances).
Both precisions are scored on the *same* items, so the difference is estimated from the
paired per-item counts: resampling items (with replacement) keeps each item's FP32 and INT8
errors together, which is what makes the interval narrow when INT8 changes few words.

The resampling uses a fixed seed (:data:`BOOTSTRAP_SEED`, numpy ``Generator``): the interval is
a pure function of the per-item counts, so two builds that measure the same counts report the
same interval and take the same decision.

Decision rule (non-inferiority at 95 %): a lower-is-better metric passes when the *upper* end of
the 95 % interval of ``int8 - fp32`` is at most the limit, i.e. the data show with 95 % confidence
that INT8 costs less than the limit. Why the bound and not the point estimate: the point estimate
of a recipe whose true cost sits at the limit falls on either side of it from one machine to the
next (a few words differ between CPUs' int8 kernels); the bound puts the threshold half an
interval away from such recipes, and with >= 2,000 words one word moves it by ~0.05 point.

The screen (:func:`screen_rejects`) is the mirror image on a subset: a recipe is dropped early
only when the *lower* end already exceeds the limit (clearly worse). A recipe the full set would
accept cannot be screened out that way except by a 2.5 % tail event, so the screen saves time
without adding a second threshold that noise can cross.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BOOTSTRAP_SEED", "BOOTSTRAP_RESAMPLES", "CONFIDENCE", "PairedRatio", "paired_ratio", "accepts",
           "screen_rejects"]

BOOTSTRAP_SEED = 20261201  # fixed: the interval must not change between builds of the same measurements
BOOTSTRAP_RESAMPLES = 2000  # percentile-interval ends move by < 0.05 point WER from 2,000 to 20,000 here
CONFIDENCE = 0.95


@dataclass(frozen=True)
class PairedRatio:
    """``sum(errors) / sum(totals)`` of both precisions on the same items, and their difference's interval."""

    fp32: float
    int8: float
    delta: float  # int8 - fp32
    low: float  # CONFIDENCE interval of delta (percentile bootstrap over items)
    high: float
    items: int  # utterances (the resampled unit)
    total: int  # reference words (the denominator)

    def as_dict(self) -> dict:
        return {"items": self.items, "words": self.total, "ci95": [round(self.low, 5), round(self.high, 5)],
                "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "unit": "utterance"}}


def paired_ratio(errors_fp32, errors_int8, totals, resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED, confidence: float = CONFIDENCE) -> PairedRatio:
    """Ratio metric of both precisions and a paired percentile-bootstrap interval of their difference.

    Args:
        errors_fp32, errors_int8: per-item error counts (e.g. word edits), same items, same order.
        totals: per-item denominators (e.g. reference words), all >= 0 and summing to > 0.

    Raises:
        ValueError: lengths differ, no items, or nothing to divide by.
    """
    a = np.asarray(errors_fp32, np.float64)
    b = np.asarray(errors_int8, np.float64)
    n = np.asarray(totals, np.float64)
    if not (a.shape == b.shape == n.shape) or a.ndim != 1:
        raise ValueError(f"paired counts must be three 1-D arrays of one length, got {a.shape}, {b.shape}, {n.shape}")
    if a.size == 0 or n.sum() <= 0:
        raise ValueError("a paired ratio needs at least one item and a positive total (reference words)")
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1), not {confidence}")
    fp, q = a.sum() / n.sum(), b.sum() / n.sum()
    rng = np.random.Generator(np.random.PCG64(seed))
    idx = rng.integers(0, a.size, size=(resamples, a.size))
    denom = np.maximum(n[idx].sum(axis=1), 1e-12)
    diffs = (b[idx].sum(axis=1) - a[idx].sum(axis=1)) / denom
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    return PairedRatio(float(fp), float(q), float(q - fp), float(low), float(high), int(a.size), int(n.sum()))


def accepts(r: PairedRatio, limit: float) -> bool:
    """The decision rule of a lower-is-better gate: the interval's upper end is at most ``limit``."""
    return r.high <= limit + 1e-12


def screen_rejects(r: PairedRatio, limit: float) -> bool:
    """The screen's rule: drop the recipe only when even the interval's lower end exceeds ``limit``."""
    return r.low > limit + 1e-12
