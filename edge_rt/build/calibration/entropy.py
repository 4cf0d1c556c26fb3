"""ONNX Runtime's entropy (KL) threshold search, with its integer bookkeeping done by numpy.

``onnxruntime.quantization.calibrate.HistogramCollector.get_entropy_threshold`` (1.32) tries every
symmetric window of the histogram and sums bins with Python's ``sum`` over numpy scalars: for a
2048-bin histogram that is ~250,000 ``sum`` calls per tensor, 58 of the 83 s a Whisper tiny
calibration took here (cProfile, 42 tensors). This is the same search with the window's outlier
counts from a cumulative sum and the 128 merged bins from one reshape. Those are integer sums, so
they are exact whatever the order; the float part (ONNX Runtime's ``smooth_distribution`` and
``entropy`` on the same arrays) is ONNX Runtime's own code. The thresholds are therefore the same
values (``tests/build/calibration/test_entropy.py`` compares them with ONNX Runtime's on real and
synthetic histograms). A histogram that is not integer counts goes to ONNX Runtime's function.

Written here because ONNX Runtime has no vectorized version; say so in a note if it ever gets one.
"""

from __future__ import annotations

import numpy as np

__all__ = ["entropy_threshold", "use_fast_entropy"]


def entropy_threshold(histogram, num_quantized_bins: int):
    """``(lowest, highest)`` for one tensor's ``(hist, edges, min, max)``, as ONNX Runtime computes it."""
    from onnxruntime.quantization.calibrate import entropy
    from onnxruntime.quantization.quant_utils import smooth_distribution

    hist, edges = histogram[0], histogram[1]
    num_bins = hist.size
    zero = num_bins // 2
    half = num_quantized_bins // 2
    dtype = edges.dtype
    below = np.concatenate([[0], np.cumsum(hist)])  # below[k] = sum(hist[:k]), exact for integers
    kl = np.zeros(zero - half + 1)
    thresholds = []
    for i in range(half, zero + 1):
        start, end = zero - i, min(zero + i + 1, num_bins)
        thresholds.append((edges[start], edges[end]))
        sliced = hist[start:end]
        p = sliced.copy()
        p[0] += below[start]
        p[-1] += below[num_bins] - below[end]
        nonzeros = (p != 0).astype(np.int64)
        merged = sliced.size // num_quantized_bins
        whole = num_quantized_bins * merged
        quantized = sliced[:whole].reshape(num_quantized_bins, merged).sum(axis=1).astype(np.int64)
        quantized[-1] += sliced[whole:].sum()
        norm = nonzeros[:whole].reshape(num_quantized_bins, merged).sum(axis=1)
        q = np.zeros(p.size, dtype=np.int64)
        # ONNX Runtime assigns quantized / norm (a float) into the int64 array: truncation, norm 0 skipped.
        share = np.where(norm != 0, quantized / np.maximum(norm, 1), 0.0)
        q[:whole] = np.repeat(share, merged).astype(np.int64)
        p, q = smooth_distribution(p), smooth_distribution(q)
        kl[i - half] = np.inf if p is None or q is None else np.array(entropy(p, q), dtype=dtype)
    best = thresholds[int(np.argmin(kl))]
    lo, hi = histogram[2], histogram[3]
    if best[0] < lo:
        best = (lo, best[1])
    if best[1] > hi:
        best = (best[0], hi)
    return best


def use_fast_entropy(collector) -> None:
    """Make an ONNX Runtime ``HistogramCollector`` search with :func:`entropy_threshold` (integer histograms)."""
    original = collector.get_entropy_threshold

    def search(histogram, num_quantized_bins):
        if not np.issubdtype(np.asarray(histogram[0]).dtype, np.integer):
            return original(histogram, num_quantized_bins)
        return entropy_threshold(histogram, num_quantized_bins)

    collector.get_entropy_threshold = search
