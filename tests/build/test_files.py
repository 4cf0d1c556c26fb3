"""How the build writes files (edge_rt/build/files.py): models as a graph plus a weights file, atomically."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from edge_rt.atomic import file_mode
from edge_rt.build.files import install_onnx, model_files, remove_onnx, save_onnx, weights_file


def _model(w: np.ndarray) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, w.shape[1]])],
                              [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_saved_model_keeps_its_weights_beside_it_and_runs_the_same(tmp_path):
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    model = _model(w)
    inline = tmp_path / "inline.onnx"
    onnx.save(model, str(inline))
    path = save_onnx(model, tmp_path / "sub" / "m.onnx")
    assert model_files(path) == [path, weights_file(path)] and weights_file(path).name == "m.onnx.data"
    assert path.stat().st_size < 1024 and weights_file(path).stat().st_size == w.nbytes
    assert model.graph.initializer[0].raw_data  # the caller's model is left as it was
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary left behind
    assert {f.stat().st_mode & 0o777 for f in model_files(path)} == {file_mode()}  # the service's user reads both
    x = np.ones((1, 64), np.float32)
    np.testing.assert_array_equal(_run(path, x), _run(inline, x))
    # the same model saved again writes the same bytes (a build that decides the same way twice)
    again = save_onnx(model, tmp_path / "again" / "m.onnx")
    for a, b in zip(model_files(path), model_files(again)):
        assert a.read_bytes() == b.read_bytes()


def test_a_model_without_large_tensors_has_no_weights_file_and_a_stale_one_goes(tmp_path):
    path = tmp_path / "m.onnx"
    weights_file(path).write_bytes(b"from an earlier build")
    save_onnx(_model(np.ones((2, 2), np.float32)), path)  # 16 bytes of weights: inline
    assert model_files(path) == [path]


def test_install_moves_a_tools_inline_output_into_the_same_form(tmp_path):
    w = np.arange(512, dtype=np.float32).reshape(32, 16)
    src = tmp_path / "work" / "cand.onnx"
    src.parent.mkdir()
    onnx.save(_model(w), str(src))
    files = install_onnx(src, tmp_path / "int8" / "m.onnx")
    assert [f.name for f in files] == ["m.onnx", "m.onnx.data"] and not src.exists()
    x = np.ones((1, 32), np.float32)
    np.testing.assert_allclose(_run(files[0], x), x @ w)
    remove_onnx(files[0])
    assert not any(f.exists() for f in files)
