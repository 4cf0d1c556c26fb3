"""Outlier-channel splitting: the few huge input channels of a MatMul stay in float, the rest go int8.

Whisper's later encoder layers feed fc2 with a handful of channels ~30x larger than the
rest (13 of 2048 in base's layer 3: max 87 vs a median of 2.6). One per-tensor int8
scale cannot hold both, and per-channel activation scales do not exist in the int8
kernels. So, exactly in float arithmetic::

    y = x @ W  ==  (x * keep) @ W  +  x[..., idx] @ W[idx]

``keep`` zeroes the outlier channels ``idx``; the first MatMul is quantized, the second
(k << d columns) stays float. The graph computes the same function before quantization
(checked in tests). ``ChannelStats`` finds the channels from a few real inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

__all__ = ["ChannelStats", "SplitResult", "split_outliers", "weight_matmuls"]

OUTLIER_SUFFIX = ".outlier_matmul"


def weight_matmuls(model) -> list:
    """MatMul nodes whose second input is an initializer (a weight), in graph order."""
    inits = {i.name for i in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits]


class ChannelStats:
    """Per-channel max |x| (last axis) of chosen tensors, over the inputs given to :meth:`collect`."""

    def __init__(self, model_path: str | Path, tensors: list[str], max_samples: int = 16):
        import onnx
        import onnxruntime as ort
        from onnx import helper

        model = onnx.load(str(model_path))
        have = {o.name for o in model.graph.output}
        for t in tensors:
            if t not in have:
                model.graph.output.append(helper.make_empty_tensor_value_info(t))
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 2
        self._session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self._names = [o.name for o in self._session.get_outputs()]
        self.tensors = list(tensors)
        self.absmax: dict[str, np.ndarray] = {}
        self.samples = 0
        self.max_samples = max_samples

    @property
    def full(self) -> bool:
        return self.samples >= self.max_samples

    def collect(self, feeds: Mapping[str, np.ndarray]) -> None:
        if self.full:
            return
        wanted = {i.name for i in self._session.get_inputs()}
        out = dict(zip(self._names, self._session.run(None, {k: v for k, v in feeds.items() if k in wanted})))
        for t in self.tensors:
            a = np.abs(out[t])
            v = a.reshape(-1, a.shape[-1]).max(axis=0)
            self.absmax[t] = np.maximum(self.absmax[t], v) if t in self.absmax else v
        self.samples += 1


@dataclass(frozen=True)
class SplitResult:
    split: Mapping[str, list[int]]  # node name -> outlier channel indices kept in float
    float_nodes: tuple[str, ...]  # the added float MatMuls (never quantize them)


def split_outliers(model, absmax: Mapping[str, np.ndarray], ratio: float, max_channels: int) -> SplitResult:
    """Rewrite ``model`` (an ``onnx.ModelProto``, in place) for every weight MatMul with outlier channels.

    A channel is an outlier when its max |x| exceeds ``ratio`` x the median channel's; a
    MatMul with more than ``max_channels`` of them is left alone (not an outlier pattern).
    """
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    split: dict[str, list[int]] = {}
    float_nodes: list[str] = []
    for node in weight_matmuls(model):
        stats = absmax.get(node.input[0])
        if stats is None or stats.size < 2:
            continue
        idx = np.nonzero(stats > ratio * max(float(np.median(stats)), 1e-12))[0]
        if idx.size == 0 or idx.size > max_channels:
            continue
        idx = idx[np.argsort(-stats[idx])]
        w = numpy_helper.to_array(inits[node.input[1]])
        keep = np.ones(w.shape[0], np.float32)
        keep[idx] = 0.0
        p = node.name.removesuffix("_node")
        model.graph.initializer.extend([
            numpy_helper.from_array(keep, f"{p}.keep"),
            numpy_helper.from_array(idx.astype(np.int64), f"{p}.outlier_idx"),
            numpy_helper.from_array(np.ascontiguousarray(w[idx]), f"{p}.outlier_weight"),
        ])
        x, y = node.input[0], node.output[0]
        pos = list(model.graph.node).index(node)
        added = [
            helper.make_node("Mul", [x, f"{p}.keep"], [f"{p}.inliers"], name=f"{p}.inliers_node"),
            helper.make_node("Gather", [x, f"{p}.outlier_idx"], [f"{p}.outliers"], name=f"{p}.outliers_node", axis=-1),
            helper.make_node("MatMul", [f"{p}.outliers", f"{p}.outlier_weight"], [f"{p}.outlier_out"],
                             name=f"{p}{OUTLIER_SUFFIX}"),
        ]
        node.input[0], node.output[0] = f"{p}.inliers", f"{p}.inlier_out"
        for k, n in enumerate(added):
            model.graph.node.insert(pos + k, n)
        model.graph.node.insert(pos + len(added) + 1,
                                helper.make_node("Add", [f"{p}.inlier_out", f"{p}.outlier_out"], [y], name=f"{p}.split_add"))
        split[node.name] = idx.tolist()
        float_nodes.append(f"{p}{OUTLIER_SUFFIX}")
    return SplitResult(split, tuple(float_nodes))
