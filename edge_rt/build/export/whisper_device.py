"""Build step: the Whisper one-step decoder with its self-attention cache update inside the graph.

``whisper_decoder.onnx`` (:mod:`edge_rt.build.export.whisper_graphs`) reads the 448-position
caches and returns only this step's keys/values (``new_k``/``new_v`` [L, beams, H, dh]); the
caller writes them into ``self_k[..., offset]`` / ``self_v[..., offset, :]`` on the host. On a
GPU that host write would mean uploading the whole cache every token (issue 12). This pass
rewrites the exported model into ``whisper_decoder_device.onnx``, which has the same inputs and
returns, per layer ``i``, the updated caches::

    self_k_out_<i>  [1, H, dh, 448]  float32  self_k_<i> with column ``offset`` = this step's key
    self_v_out_<i>  [1, H, 448, dh]  float32  self_v_<i> with row ``offset`` = this step's value
    logits          [1, n_vocab]     float32  unchanged

for one sequence (``beams`` is fixed at 1: beam search keeps its caches on the host), so a runtime
binds ``device_resident={"self_k_<i>": "self_k_out_<i>", "self_v_<i>": "self_v_out_<i>"}``
and the cache never leaves the device. ``new_k``/``new_v`` are dropped. The write is one
``ScatterElements`` per cache (axis 3 for the transposed keys, 2 for the values), at the
model's own opset. The CPU keeps the original graph: there the host write is L * 2 * d floats
per step (24 KB for Whisper base), while ONNX Runtime's ScatterElements copies every cache
(11 MB for base) and the carry copies it back: a base step measured ~8 % slower on a 2-core x86.

onnx and numpy only; nothing here runs a model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["DEVICE_PREFIX", "check_device_decoder", "device_cache_decoder", "export_device_decoder", "resident_pairs"]

DEVICE_PREFIX = "device_cache/"  # names of every node and tensor the pass adds
MIN_OPSET = 13  # ScatterElements (11) and Split with a ``split`` input (13)


def resident_pairs(n_layer: int) -> dict[str, str]:
    """``{cache input: updated cache output}`` of the device variant, for ``Engine.bind(device_resident=...)``."""
    pairs = {}
    for i in range(n_layer):
        pairs[f"self_k_{i}"] = f"self_k_out_{i}"
        pairs[f"self_v_{i}"] = f"self_v_out_{i}"
    return pairs


def _dims(vi) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def _n_layers(inputs: dict) -> int:
    n = 0
    while f"self_k_{n}" in inputs and f"self_v_{n}" in inputs:
        n += 1
    return n


def _pin_beams(graph) -> None:
    """The exported decoder runs ``beams`` sequences (1 greedy, the beam width for beam search); beam search
    needs the cache on the host (stages/asr/beam.py), so the device variant is for one sequence: beams = 1."""
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param == "beams":
                d.dim_value = 1  # clears dim_param (a oneof)


def _check_source(graph, opset: int) -> tuple[int, int, int]:
    """(layers, heads, d_head) of an exported decoder; raises ValueError naming what is missing."""
    inputs = {vi.name: vi for vi in graph.input}
    outputs = {vi.name: vi for vi in graph.output}
    if any(n.startswith("self_k_out_") for n in outputs):
        raise ValueError("the decoder already has self_k_out_<i> outputs (the pass was applied twice)")
    L = _n_layers(inputs)
    need = ["tokens", "offset", "self_k_0", "self_v_0"]
    missing = [n for n in need if n not in inputs] + [n for n in ("logits", "new_k", "new_v") if n not in outputs]
    if L == 0 or missing:
        raise ValueError(f"not an edge_rt Whisper one-step decoder: lacks {missing or ['self_k_<i>/self_v_<i>']} "
                         f"(inputs {list(inputs)}, outputs {list(outputs)}); export it with whisper_graphs.decoder_graph")
    if opset < MIN_OPSET:
        raise ValueError(f"decoder opset {opset} < {MIN_OPSET}: ScatterElements/Split need a newer opset; re-export")
    _, H, dh, T = _dims(inputs["self_k_0"])
    if _dims(inputs["self_v_0"]) != [1, H, T, dh] or not all(isinstance(d, int) and d > 0 for d in (H, dh, T)):
        raise ValueError(f"cache shapes self_k_0 {_dims(inputs['self_k_0'])} / self_v_0 {_dims(inputs['self_v_0'])} "
                         f"are not [1, H, dh, T] / [1, H, T, dh] with static sizes")
    for name in ("new_k", "new_v"):
        if _dims(outputs[name]) != [L, 1, H, dh]:
            raise ValueError(f"{name} is {_dims(outputs[name])}, expected [{L}, 1, {H}, {dh}]")
    return L, H, dh


class _Adder:
    """Appends constants and nodes under :data:`DEVICE_PREFIX` names."""

    def __init__(self, graph):
        self.graph, self.n = graph, 0

    def name(self, hint: str) -> str:
        self.n += 1
        return f"{DEVICE_PREFIX}{hint}_{self.n}"

    def const(self, value: np.ndarray, hint: str = "const") -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, n_out: int = 1, **attrs) -> list[str]:
        from onnx import helper

        node_name = self.name(op_type)
        outs = [out] if out else [f"{node_name}:{k}" for k in range(n_out)]
        self.graph.node.append(helper.make_node(op_type, inputs, outs, node_name, **attrs))
        return outs


def _rows(graph, g: _Adder, output: str, L: int) -> list[str]:
    """Per-layer [1, 1, H, dh] tensors of ``output`` [L, 1, H, dh]: the inputs of its Concat, else a Split."""
    producer = next((n for n in graph.node if output in n.output), None)
    if producer is not None and producer.op_type == "Concat" and len(producer.input) == L:
        axis = next((a.i for a in producer.attribute if a.name == "axis"), None)
        if axis == 0:
            return list(producer.input)
    return g.op("Split", [output, g.const(np.ones(L, np.int64), "split")], n_out=L, axis=0)


def _prune(graph, keep_outputs: set[str]) -> None:
    """Drop nodes no kept output depends on, then initializers nothing reads."""
    needed, kept = set(keep_outputs), []
    for node in reversed(graph.node):  # the graph is topologically sorted
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    used = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(used)


def device_cache_decoder(model):
    """The device-cache variant of an exported one-step decoder (an ``onnx.ModelProto``; see module doc).

    The input model is not modified; the result passed :func:`check_device_decoder`. Raises
    ValueError when ``model`` is not such a decoder.
    """
    import onnx
    from onnx import TensorProto, helper

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    _pin_beams(graph)
    L, H, dh = _check_source(graph, opset)
    inputs = {vi.name: vi for vi in graph.input}
    T = _dims(inputs["self_k_0"])[3]
    g = _Adder(graph)
    k_rows, v_rows = _rows(graph, g, "new_k", L), _rows(graph, g, "new_v", L)
    # The offset as an index tensor of each update's shape (ScatterElements indexes element-wise).
    at = g.op("Reshape", ["offset", g.const(np.array([1, 1, 1, 1], np.int64), "shape")])[0]
    idx_k = g.op("Expand", [at, g.const(np.array([1, H, dh, 1], np.int64), "shape")])[0]
    idx_v = g.op("Expand", [at, g.const(np.array([1, H, 1, dh], np.int64), "shape")])[0]
    shape_k = g.const(np.array([1, H, dh, 1], np.int64), "shape")
    shape_v = g.const(np.array([1, H, 1, dh], np.int64), "shape")
    new_outputs = []
    for i in range(L):
        k = g.op("Reshape", [k_rows[i], shape_k])[0]  # [1, 1, H, dh] -> [1, H, dh, 1]: same memory order
        v = g.op("Reshape", [v_rows[i], shape_v])[0]
        g.op("ScatterElements", [f"self_k_{i}", idx_k, k], f"self_k_out_{i}", axis=3)
        g.op("ScatterElements", [f"self_v_{i}", idx_v, v], f"self_v_out_{i}", axis=2)
        new_outputs += [helper.make_tensor_value_info(f"self_k_out_{i}", TensorProto.FLOAT, [1, H, dh, T]),
                        helper.make_tensor_value_info(f"self_v_out_{i}", TensorProto.FLOAT, [1, H, T, dh])]
    kept = [vi for vi in graph.output if vi.name not in ("new_k", "new_v")]
    del graph.output[:]
    graph.output.extend([*kept, *new_outputs])
    _prune(graph, {vi.name for vi in graph.output})
    names = {vi.name for vi in graph.output}
    stale = [vi for vi in graph.value_info if vi.name in ("new_k", "new_v") and vi.name not in names]
    for vi in stale:
        graph.value_info.remove(vi)
    out.doc_string = (model.doc_string + "; " if model.doc_string else "") + (
        "device-cache variant: self_k_out_<i>/self_v_out_<i> are the caches with this step written at offset "
        "(edge_rt/build/export/whisper_device.py)")
    check_device_decoder(out)
    return out


def export_device_decoder(src: str | Path, dst: str | Path) -> Path:
    """Read ``whisper_decoder.onnx`` at ``src``, write its device-cache variant to ``dst`` (checked, atomic)."""
    import onnx

    from edge_rt.build.files import save_onnx

    return save_onnx(device_cache_decoder(onnx.load(str(src))), dst)


def check_device_decoder(model) -> None:
    """Full ONNX check with strict shape inference; every cache output has its input's shape."""
    import onnx

    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    shapes = {vi.name: _dims(vi) for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]}
    for src, dst in resident_pairs(_n_layers({vi.name: vi for vi in model.graph.input})).items():
        if shapes.get(dst) != shapes[src]:
            raise ValueError(f"{dst} infers to {shapes.get(dst)}, but {src} is {shapes[src]}")
