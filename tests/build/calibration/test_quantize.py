"""Q/DQ and dynamic INT8 of tiny real graphs, outlier splitting, and bad inputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from edge_rt.build.calibration.calibrate import Calibrator, CalibrationOptions
from edge_rt.build.calibration.outliers import ChannelStats, split_outliers
from edge_rt.build.calibration.quantize import (QuantizationError, QuantRecipe, gemm_as_matmul, quantize, select_nodes,
                                    tensors_to_calibrate)
from tests.build.calibration.test_calibrate import feeds, mlp


REL_L2_LIMIT = 0.07  # INT8 vs FP32 on the tiny MLP (see test_static_qdq_is_close_and_fuses)


def run(path, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, x)[0]


def calibrate(path, recipe, n=16):
    model = onnx.load(str(path))
    nodes = select_nodes(model, recipe)
    with Calibrator(path, tensors_to_calibrate(model, nodes, recipe), CalibrationOptions(num_bins=128)) as cal:
        for f in feeds(n):
            cal.collect(f)
        return nodes, cal.finish()


@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_static_qdq_is_close_and_fuses(tmp_path, activations):
    path = mlp(tmp_path / "mlp.onnx")
    recipe = QuantRecipe("full", activations=activations, split_outliers=None)
    nodes, cal = calibrate(path, recipe)
    out = quantize(path, cal, nodes, recipe, tmp_path / "q.onnx")
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "MatMul"} <= ops
    x = feeds(1, seed=9)[0]
    ref, got = run(path, x), run(out, x)
    # Relative L2 error measured: < 5 % on AVX-512 VNNI, 5.7-6.3 % on AVX2 without VNNI (another int8
    # GEMM kernel); 7 % holds both and still fails a broken scale (tens of %).
    assert np.linalg.norm(ref - got) / np.linalg.norm(ref) < REL_L2_LIMIT
    # ONNX Runtime fuses DQ -> MatMul (float out) into MatMulIntegerToFloat
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"])
    assert "MatMulIntegerToFloat" in {n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node}


def test_dynamic_needs_no_calibration(tmp_path):
    path = mlp(tmp_path / "mlp.onnx")
    recipe = QuantRecipe("dynamic", mode="dynamic", op_types=("MatMul",), split_outliers=None)
    out = quantize(path, None, select_nodes(onnx.load(str(path)), recipe), recipe, tmp_path / "d.onnx")
    x = feeds(1)[0]
    assert np.linalg.norm(run(path, x) - run(out, x)) / np.linalg.norm(run(path, x)) < REL_L2_LIMIT


def tied_projection(path, d=16, vocab=48, seed=0, **gemm):
    """Token embedding (Gather) + the tied output projection Gemm(h, E, transB=1): Whisper's decoder ends."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    emb = numpy_helper.from_array(rng.standard_normal((vocab, d)).astype(np.float32), "emb")
    bias = numpy_helper.from_array(rng.standard_normal(vocab).astype(np.float32), "bias")
    nodes = [helper.make_node("Gather", ["emb", "tok"], ["e"], name="embed"),
             helper.make_node("Add", ["e", "x"], ["h"], name="mix"),
             helper.make_node("Gemm", ["h", "emb", "bias"], ["logits"], name="logits", **{"transB": 1, **gemm})]
    g = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d]),
                                          helper.make_tensor_value_info("tok", TensorProto.INT64, [1])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, vocab])], [emb, bias])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_tied_gemm_is_quantized_dynamically_through_a_matmul(tmp_path):
    path = tied_projection(tmp_path / "tied.onnx")
    x = {"x": np.random.default_rng(3).standard_normal((1, 16)).astype(np.float32), "tok": np.array([5])}
    model = onnx.load(str(path))
    assert gemm_as_matmul(model, ["logits"]) == 1
    onnx.save(model, str(tmp_path / "mm.onnx"))
    np.testing.assert_allclose(run(tmp_path / "mm.onnx", x), run(path, x), rtol=1e-5, atol=1e-5)  # exact rewrite

    recipe = QuantRecipe("logits", mode="dynamic", op_types=("Gemm",), split_outliers=None)
    nodes = select_nodes(onnx.load(str(path)), recipe)
    assert nodes == ["logits"]
    out = quantize(path, None, nodes, recipe, tmp_path / "q.onnx")
    q = onnx.load(str(out))
    assert "Gemm" not in {n.op_type for n in q.graph.node}
    kinds = {i.name: i.data_type for i in q.graph.initializer}
    assert kinds["emb"] == onnx.TensorProto.FLOAT  # the Gather still reads the float table
    assert onnx.TensorProto.INT8 in kinds.values()  # the projection's transposed copy is int8
    ref, got = run(path, x), run(out, x)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05
    assert got.argmax() == ref.argmax()


@pytest.mark.parametrize("weights,reduce_range", [("int8", False), ("int8", True), ("uint8", False)])
def test_dynamic_weights_that_cannot_saturate(tmp_path, weights, reduce_range):
    """A dynamic recipe's ``weights`` and ``reduce_range`` reach the quantizer. x86 CPUs without VNNI sum two
    u8 x s8 products in 16 bits (VPMADDUBSW): 8-bit signed weights can saturate them, 7-bit ones cannot
    (2 x 255 x 64 = 32,640), nor can uint8 weights (u8 x u8 is summed in 32 bits). The Whisper decoder's
    ``dynamic-all`` recipe takes uint8 (with int8 it failed an AVX2 build's screen)."""
    path = tied_projection(tmp_path / "tied.onnx", d=64, vocab=256)
    recipe = QuantRecipe("all", mode="dynamic", op_types=("MatMul", "Gemm"), split_outliers=None,
                         weights=weights, reduce_range=reduce_range)
    out = quantize(path, None, select_nodes(onnx.load(str(path)), recipe), recipe, tmp_path / "q.onnx")
    kind = onnx.TensorProto.UINT8 if weights == "uint8" else onnx.TensorProto.INT8
    q = [onnx.numpy_helper.to_array(i) for i in onnx.load(str(out)).graph.initializer
         if i.data_type == kind and len(i.dims) == 2]
    assert q
    if weights == "int8":
        top = max(int(np.abs(w.astype(np.int32)).max()) for w in q)
        assert (top <= 64) if reduce_range else (top > 64)
    x = {"x": np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32), "tok": np.array([7])}
    ref, got = run(path, x), run(out, x)
    # Relative L2 error on an AVX2 EPYC: uint8 0.8 %, 7-bit int8 1.2 %, int8 6.9 % (the saturation; a VNNI CPU's
    # would be smaller, so int8 is not checked).
    if weights == "uint8" or reduce_range:
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.03


def test_the_whisper_decoder_s_dynamic_all_takes_uint8_weights():
    """With int8 weights it failed an AVX2 build's screen (the saturation); uint8 is for dynamic recipes only."""
    from edge_rt.build.calibration.plan import PLAN

    decoder = next(p for p in PLAN["asr"] if p.pattern == "decoder")
    assert next(r for r in decoder.recipes if r.name == "dynamic-all").weights == "uint8"
    with pytest.raises(ValueError, match="weights"):
        QuantRecipe("static-u8", weights="uint8")


def test_a_gemm_that_is_not_a_plain_product_is_named(tmp_path):
    model = onnx.load(str(tied_projection(tmp_path / "tied.onnx", alpha=0.5)))
    with pytest.raises(QuantizationError, match="'logits'.*not a plain"):
        gemm_as_matmul(model, ["logits"])


def test_select_nodes_honours_exclusions_and_skips_activation_matmuls(tmp_path):
    model = onnx.load(str(mlp(tmp_path / "mlp.onnx")))
    assert select_nodes(model, QuantRecipe("a")) == ["fc1", "fc2"]
    assert select_nodes(model, QuantRecipe("b", exclude=(r"^fc2$",))) == ["fc1"]
    with pytest.raises(ValueError, match="not a regular expression"):
        QuantRecipe("c", exclude=("(",))
    with pytest.raises(ValueError, match="mode"):
        QuantRecipe("d", mode="fp4")


def test_outlier_split_is_exact_in_float(tmp_path):
    path = mlp(tmp_path / "mlp.onnx")
    x = feeds(4)
    for f in x:
        f["x"][..., 3] *= 60.0  # one huge channel, as in Whisper's fc2 inputs
    stats = ChannelStats(path, ["x", "r"])
    for f in x:
        stats.collect(f)
    model = onnx.load(str(path))
    result = split_outliers(model, stats.absmax, ratio=8.0, max_channels=4)
    assert result.split == {"fc1": [3]} and result.float_nodes == ("fc1.outlier_matmul",)
    onnx.checker.check_model(model)
    onnx.save(model, str(tmp_path / "split.onnx"))
    np.testing.assert_allclose(run(tmp_path / "split.onnx", x[0]), run(path, x[0]), rtol=1e-4, atol=1e-4)
    assert "fc1.outlier_matmul" not in select_nodes(model, QuantRecipe("full"), result.float_nodes)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_corrupt_onnx_is_a_named_error_and_leaves_nothing(tmp_path, damage):
    path = mlp(tmp_path / "mlp.onnx")
    nodes, cal = calibrate(path, QuantRecipe("full", split_outliers=None), n=4)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2] if damage == "truncated" else b"\x00junk" * 50)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(QuantizationError) as e:
        quantize(bad, cal, nodes, QuantRecipe("full", split_outliers=None), out_dir / "q.onnx")
    assert "bad.onnx" in str(e.value)
    assert list(out_dir.iterdir()) == []  # no half-written model, no temporary file
