"""Smart Turn exporter: the shipped graph pinned to batch 1, and foreign graphs refused."""

from __future__ import annotations

import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edge_rt.build.export import smart_turn
from edge_rt.build.packs import PackSpec, cache_dir, obtain_wheel
from edge_rt.errors import PackSpecError

SHIPPED = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The model file as the wheel ships it (sha256-checked wheel; only this file is unpacked)."""
    wheel = obtain_wheel(PackSpec.load("tiny").wheels["pipecat-ai"], cache_dir() / "wheels")
    path = tmp_path_factory.mktemp("wheel") / "smart-turn-v3.2-cpu.onnx"
    with zipfile.ZipFile(wheel) as zf:
        path.write_bytes(zf.read(SHIPPED))
    return path


def _dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def _graph(path, in_name="input_features", in_shape=("batch", 80, 800), out_shape=("batch", 1)):
    """A tiny real graph: mean over mels and frames, then a sigmoid."""
    nodes = [helper.make_node("ReduceMean", [in_name, "axes"], ["m"], keepdims=0),
             helper.make_node("Unsqueeze", ["m", "one"], ["u"]),
             helper.make_node("Sigmoid", ["u"], ["logits"])]
    inits = [helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2]),
             helper.make_tensor("one", TensorProto.INT64, [1], [1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, list(in_shape))],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, list(out_shape))], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def test_the_shipped_model_is_copied_with_batch_1(shipped, tmp_path):
    entry = smart_turn.export({"model": shipped}, {}, tmp_path)
    out = tmp_path / entry["models"]["smart_turn"]["fp32"]
    assert entry["kind"] == "smart_turn" and entry["frames"] == 800 and entry["input"] == "input_features"
    model = onnx.load(str(out))
    assert [_dims(v) for v in model.graph.input] == [[1, 80, 800]]
    assert [_dims(v) for v in model.graph.output] == [[1, 1]]
    # Pinning the batch changes nothing the graph computes.
    x = np.random.default_rng(0).standard_normal((1, 80, 800)).astype(np.float32)
    before = ort.InferenceSession(str(shipped), providers=["CPUExecutionProvider"]).run(None, {"input_features": x})
    after = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"input_features": x})
    assert after[0].shape == (1, 1) and 0.0 <= after[0][0, 0] <= 1.0
    np.testing.assert_array_equal(after[0], before[0])


def test_a_small_graph_with_the_right_signature_is_accepted(tmp_path):
    entry = smart_turn.export({"model": _graph(tmp_path / "ok.onnx")}, {}, tmp_path / "pack")
    model = onnx.load(str(tmp_path / "pack" / entry["models"]["smart_turn"]["fp32"]))
    assert _dims(model.graph.input[0]) == [1, 80, 800] and _dims(model.graph.output[0]) == [1, 1]


@pytest.mark.parametrize("kwargs,why", [
    ({"in_shape": ("batch", 80, 3000)}, "30-s Whisper window"),
    ({"in_shape": ("batch", 128, 800)}, "128 mels"),
    ({"in_shape": (2, 80, 800)}, "fixed batch of 2"),
    ({"in_name": "audio"}, "another input name"),
])
def test_a_foreign_graph_is_refused(tmp_path, kwargs, why):
    bad = _graph(tmp_path / "bad.onnx", **kwargs)
    with pytest.raises(PackSpecError, match=r"not a Smart Turn v3 graph.*\[stages.turn\]"):
        smart_turn.export({"model": bad}, {}, tmp_path / "pack")
    assert not (tmp_path / "pack" / smart_turn.OUT).exists(), why
