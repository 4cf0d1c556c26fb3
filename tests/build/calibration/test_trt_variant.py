"""TensorRT twins: symmetric Q/DQ from the same calibration, the zero-point check, and the built packs.

The check of issue 12: every Q/DQ node of a model handed to TensorRT has an INT8 zero point
that is all zeros; an asymmetric model built here must fail it.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge_rt.build.calibration.calibrate import Calibration
from edge_rt.build.calibration.quantize import QuantRecipe, quantize, select_nodes, trt_qdq_problems
from edge_rt.build.calibration.trt_variant import (BACKEND_TRT, GATE_ON_GPU, TRT_DIR, TrtJob, make_trt_variant,
                                                   trt_nodes, trt_source)
from edge_rt.pack import engines_dir
from tests.build.calibration.test_calibrate import feeds, mlp
from tests.build.calibration.test_quantize import calibrate, run

STATIC = QuantRecipe("full", split_outliers=None)


def _zero_points(model) -> dict[str, np.ndarray]:
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return {n.name: inits[n.input[2]] for n in model.graph.node
            if n.op_type in ("QuantizeLinear", "DequantizeLinear")}


def test_symmetric_recipe_gives_int8_zero_points_and_stays_close(tmp_path):
    path = mlp(tmp_path / "mlp.onnx")
    nodes, cal = calibrate(path, STATIC)
    trt = QuantRecipe("trt", split_outliers=None, symmetric=True, quantize_outputs=())
    out = quantize(path, cal.symmetric(), nodes, trt, tmp_path / "trt.onnx")
    model = onnx.load(str(out))
    zps = _zero_points(model)
    assert len(zps) == 6  # Q+DQ on both activations, DQ on both weights
    assert all(z.dtype == np.int8 and not z.any() for z in zps.values())
    weight_scales = [i for i in model.graph.initializer if i.name in ("w1_scale", "w2_scale")]
    assert sorted(tuple(i.dims) for i in weight_scales) == [(16,), (32,)]  # per output channel
    assert trt_qdq_problems(model) == []
    x = feeds(1, seed=9)[0]
    ref = run(path, x)
    assert np.linalg.norm(ref - run(out, x)) / np.linalg.norm(ref) < 0.05


def test_asymmetric_models_fail_the_check(tmp_path):
    path = mlp(tmp_path / "mlp.onnx")
    nodes, cal = calibrate(path, STATIC)  # x ~ N(0,1), Relu output one-sided: asymmetric ranges
    asym = onnx.load(str(quantize(path, cal, nodes, STATIC, tmp_path / "asym.onnx")))
    problems = trt_qdq_problems(asym)
    assert problems and all("is not 0" in p for p in problems)
    assert any("'r_QuantizeLinear'" in p for p in problems)
    u8 = QuantRecipe("u8", activations="uint8", split_outliers=None)
    uint8 = onnx.load(str(quantize(path, cal, nodes, u8, tmp_path / "u8.onnx")))
    assert any("uint8, not int8" in p for p in trt_qdq_problems(uint8))


def test_a_missing_zero_point_or_a_non_int8_weight_is_named():
    w = numpy_helper.from_array(np.ones((4, 4), np.uint8), "w_q")
    s = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    zp = numpy_helper.from_array(np.array(0, np.uint8), "zp")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["xq"], name="q_no_zp"),
             helper.make_node("DequantizeLinear", ["w_q", "s", "zp"], ["w"], name="dq_u8")]
    g = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4])], [w, s, zp])
    problems = trt_qdq_problems(helper.make_model(g))
    assert any("'q_no_zp'" in p and "no zero point" in p for p in problems)
    assert any("'dq_u8'" in p and "uint8, not int8" in p for p in problems)
    assert any("'dq_u8'" in p and "'w_q' of type uint8" in p for p in problems)


def test_symmetric_ranges():
    cal = Calibration({"a": (-0.5, 2.0), "b": (-3.0, 1.0)}, {"a": "max (one-sided)", "b": "entropy"}, 7)
    sym = cal.symmetric()
    assert sym.ranges == {"a": (-2.0, 2.0), "b": (-3.0, 3.0)} and sym.samples == 7
    assert sym.rules["a"] == "symmetric of max (one-sided)"


def test_which_nodes_the_twin_takes():
    dyn = QuantRecipe("dynamic", mode="dynamic", op_types=("MatMul",), split_outliers=None)
    assert trt_source((STATIC, dyn), [{"result": "no speed-up"}, {"result": "passed"}], dyn)[0] is dyn
    assert trt_source((STATIC,), [{"result": "no speed-up (x0.5 < x1.1)"}], None)[0] is STATIC
    none, why = trt_source((STATIC, dyn), [{"result": "no speed-up"}, {"result": "failed the gate"}], None)
    assert none is None and "accuracy gate" in why


def test_make_trt_variant_writes_the_twin_and_symmetric_tables(tmp_path):
    path = mlp(tmp_path / "mlp.onnx")
    nodes, cal = calibrate(path, STATIC)
    pack, work = tmp_path / "pack", tmp_path / "work"
    work.mkdir()
    graph = onnx.load(str(path))
    chosen = trt_nodes(graph, STATIC, cal, ())
    assert chosen == tuple(select_nodes(graph, STATIC))
    rec = make_trt_variant(TrtJob("x/mlp", path, path, cal, STATIC, chosen, work, pack), feeds(2))
    assert rec["file"] == f"{TRT_DIR}/mlp.onnx" and rec["backend"] == BACKEND_TRT and rec["gate"] == GATE_ON_GPU
    assert trt_qdq_problems(onnx.load(str(pack / rec["file"]))) == []
    ranges = json.loads((pack / rec["calibration_tables"] / "ranges.json").read_text())["ranges"]
    assert ranges and all(lo == -hi for lo, hi in ranges.values())
    assert set(rec["files"]) >= {rec["file"], f"{rec['calibration_tables']}/ranges.json"}


def test_a_twin_that_fails_the_check_is_refused_not_written(tmp_path, monkeypatch):
    import edge_rt.build.calibration.trt_variant as tv

    path = mlp(tmp_path / "mlp.onnx")
    nodes, cal = calibrate(path, STATIC)
    (tmp_path / "work").mkdir()
    monkeypatch.setattr(tv, "trt_recipe", lambda source: STATIC)  # asymmetric: must not reach the pack
    monkeypatch.setattr(Calibration, "symmetric", lambda self: self)
    rec = make_trt_variant(TrtJob("x/mlp", path, path, cal, STATIC, tuple(nodes), tmp_path / "work",
                                  tmp_path / "pack"), [])
    assert rec["file"] is None and any("is not 0" in p for p in rec["refused"])
    assert not (tmp_path / "pack" / TRT_DIR / "mlp.onnx").exists()


@pytest.mark.parametrize("pack_name", ["tiny", "default"])
def test_built_tensorrt_twins_are_symmetric_int8(pack_name, request):
    """Issue 12: every Q/DQ node of every model the pack hands TensorRT has an INT8 zero point of 0."""
    if not (engines_dir() / pack_name / "manifest.json").is_file():
        pytest.skip(f"engines/{pack_name} is not built (python tools/build_engines.py --pack {pack_name})")
    pack = request.getfixturevalue(f"{pack_name}_pack")
    records = {f"{s}/{m}": r for s, st in pack.manifest["int8"]["stages"].items() for m, r in st["models"].items()}
    if not any("trt" in r for r in records.values()):
        pytest.skip(f"engines/{pack_name} was built before TensorRT twins existed: rebuild it")
    twins = {name: r["trt"] for name, r in records.items() if (r.get("trt") or {}).get("file")}
    assert any(t.get("nodes_from") != "dynamic" for t in twins.values()), twins  # a statically calibrated twin
    for name, r in records.items():  # a model without a twin says why (the tiny encoder's gate is machine-bound)
        assert name in twins or (r.get("trt") or {}).get("reason"), (name, r.get("trt"))
    for name, trt in twins.items():
        assert trt["backend"] == BACKEND_TRT and trt["file"].startswith(f"{TRT_DIR}/"), name
        stage, model = name.split("/", 1)
        assert pack.stage(stage)["models"][model]["int8_trt"] == trt["file"]
        model_proto = onnx.load(str(pack.dir / trt["file"]))
        assert trt_qdq_problems(model_proto) == [], name
        assert any(n.op_type == "QuantizeLinear" for n in model_proto.graph.node), name
        ranges = json.loads((pack.dir / trt["calibration_tables"] / "ranges.json").read_text())["ranges"]
        assert all(lo == -hi for lo, hi in ranges.values()), name
