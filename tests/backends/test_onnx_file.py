"""Reading named initializers from an .onnx file without the onnx package (edge_rt/backends/onnx_file.py)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.backends.onnx_file import find_initializers, read_initializer


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """A graph with raw-data initializers of several dtypes and shapes, one in typed fields, one scalar."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((300, 7)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.integers(-128, 127, (5, 4, 3)).astype(np.int8), "q"),
             numpy_helper.from_array(np.arange(6, dtype=np.int64), "idx"),
             numpy_helper.from_array(np.float32(2.5), "scalar"),
             helper.make_tensor("typed", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])]  # float_data, not raw
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 300])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path_factory.mktemp("onnx_file") / "g.onnx"
    onnx.save(model, str(path))
    return path, {i.name: numpy_helper.to_array(i) for i in inits}


def test_raw_initializers_are_found_and_read_exactly(model_path):
    path, ref = model_path
    found = find_initializers(path, ["W", "q", "idx", "scalar", "typed", "absent"])
    assert set(found) == {"W", "q", "idx", "scalar"}  # typed-field and absent tensors are left out
    for name, loc in found.items():
        arr = read_initializer(path, loc)
        assert arr.dtype == ref[name].dtype and arr.shape == ref[name].shape, name
        np.testing.assert_array_equal(arr, ref[name])


def test_initializers_in_an_external_data_file_are_found_and_read_exactly(model_path, tmp_path):
    """As the build saves models (edge_rt/build/files.py): the graph, and its weights beside it."""
    import onnx

    from edge_rt.build.files import save_onnx, weights_file

    path, ref = model_path
    ext = save_onnx(onnx.load(str(path)), tmp_path / "ext.onnx")
    assert weights_file(ext).is_file() and ext.stat().st_size < 1024 < weights_file(ext).stat().st_size
    found = find_initializers(ext, ["W", "q", "idx", "scalar", "typed", "absent"])
    assert {n for n, loc in found.items() if loc.file == "ext.onnx.data"} == {"W"}  # the tensors of >= 1 KiB
    assert set(found) == {"W", "q", "idx", "scalar"}
    for name, loc in found.items():
        np.testing.assert_array_equal(read_initializer(ext, loc), ref[name])
    weights_file(ext).write_bytes(weights_file(ext).read_bytes()[:100])  # cut short
    with pytest.raises(ValueError, match="truncated"):
        read_initializer(ext, found["W"])


def test_only_the_names_asked_for_are_returned(model_path):
    path, _ = model_path
    assert set(find_initializers(path, ["q"])) == {"q"}
    assert find_initializers(path, []) == {}


def test_a_truncated_file_is_a_value_error(model_path, tmp_path):
    path, _ = model_path
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="ONNX|protobuf"):
        find_initializers(cut, ["W"])


def test_the_pack_embedding_matches_onnx(tiny_pack):
    """On a real Marian graph: the tied embedding read here equals what the onnx package reads."""
    import onnx
    from onnx import numpy_helper

    path = tiny_pack.model("mt", "en-pt/decoder", "int8")
    loc = find_initializers(path, ["Wemb"])["Wemb"]
    ref = next(numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer if i.name == "Wemb")
    np.testing.assert_array_equal(read_initializer(path, loc), ref)
