"""The 8 GB Orin Nano budget: the arithmetic with numbers, and the ONNX I/O estimate on a tiny real graph."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from edge_rt.ops.memory_budget import MB, SYSTEM_RESERVE_MB, MemoryBudget, ModelMemory, _io_estimate


def test_totals_per_backend_and_the_verdict():
    models = (ModelMemory("asr/encoder", "tensorrt", 100 * MB, 300 * MB, 50 * MB, True),
              ModelMemory("mt/en-pt/decoder", "onnxruntime", 100 * MB, 100 * MB, 2 * MB, False))
    b = MemoryBudget(models, base_rss_mb=80.0, host_rss_mb=400.0)
    assert b.engine_mb == 100 and b.onnx_mb == 400 and b.activation_mb == 50
    assert b.total_mb("cpu") == 80 + 400 + SYSTEM_RESERVE_MB
    # TensorRT: the plan and its activations, plus the host share of the model that fell back (100 of 400 MB)
    assert b.total_mb("tensorrt") == 80 + 100 + 100 + 50 + SYSTEM_RESERVE_MB
    assert b.verdict("cpu")[0] == "ok" and "2016 MB of 8192 MB" in b.verdict("cpu")[1]
    status, text = b.verdict("cpu", limit_mb=2000)
    assert status == "warn" and "does NOT fit" in text
    assert MemoryBudget(models, None, None).verdict("cpu")[0] == "info"


def test_io_estimate_uses_the_largest_bucket(tmp_path):
    x = helper.make_tensor_value_info("mel", TensorProto.FLOAT, [1, 80, "frames"])
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 80, "frames"])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])
    graph = helper.make_graph([helper.make_node("Relu", ["mel"], ["out"])], "g", [x, ids], [y])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    # frames bound by two profiles (the larger counts); "n" unbound: counted as 1 (a lower bound)
    assert _io_estimate(path, [{"frames": 500}, {"frames": (100, 200, 3000)}]) == 2 * 80 * 3000 * 4 + 8
