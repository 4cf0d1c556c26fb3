"""Pure parts of static-shape execution: bucket choice, buffer plans, TensorRT profile lookup (CPU only)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from edge_rt.backends.base import plan_buckets, select_bucket
from edge_rt.backends.ort import OrtEngine
from edge_rt.backends.trt import TrtError, plan_from_shapes, profile_index


def test_select_bucket_takes_the_smallest_that_fits():
    buckets = (500, 1000, 1500, 2000, 3000)
    assert select_bucket(1, buckets) == 500
    assert select_bucket(500, buckets) == 500
    assert select_bucket(501, buckets) == 1000
    assert select_bucket(99999, buckets) == 3000  # the caller splits longer input
    with pytest.raises(ValueError):
        select_bucket(3, ())


def test_buffer_plans_are_static_and_sized():
    plans = plan_buckets({500: ({"mel": ((1, 80, 500), "float32")}, {"cross_k": ((6, 1, 8, 64, 250), "float32")}),
                          3000: ({"mel": ((1, 80, 3000), "float32")}, {"cross_k": ((6, 1, 8, 64, 1500), "float32")})})
    assert plans[500].nbytes == 4 * (80 * 500 + 6 * 8 * 64 * 250)
    ins, outs = plans[3000].allocate()
    assert ins["mel"].shape == (1, 80, 3000) and outs["cross_k"].flags.c_contiguous
    with pytest.raises(ValueError, match="non-static"):
        plan_buckets({1: ({"x": ((1, -1), "float32")}, {})})


def test_profile_lookup_matches_the_bucket_shapes():
    profiles = [{"mel": (1, 80, 500)}, {"mel": (1, 80, 1000)}, {"mel": (1, 80, 3000)}]
    assert profile_index(profiles, {"mel": (1, 80, 1000)}) == 1
    with pytest.raises(TrtError, match="no optimisation profile"):
        profile_index(profiles, {"mel": (1, 80, 700)})
    plan = plan_from_shapes(3000, {"mel": np.zeros((1, 80, 3000), np.float32)}, {})
    assert profile_index(profiles, {t.name: t.shape for t in plan.inputs}) == 2


def test_ort_binding_reads_and_writes_in_place(default_pack):
    eng = OrtEngine(default_pack.model("vad", "silero"))
    x = np.zeros((1, 576), np.float32)
    state = np.zeros((2, 1, 128), np.float32)
    sr = np.array(16000, np.int64)
    prob, state_out = np.zeros((1, 1), np.float32), np.zeros((2, 1, 128), np.float32)
    step = eng.bind({"input": x, "state": state, "sr": sr}, {"output": prob, "stateN": state_out})
    x[:] = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32) * 0.2
    step.run()
    ref = eng.run({"input": x, "state": state, "sr": sr})
    np.testing.assert_allclose(prob, ref["output"], rtol=1e-6)
    np.testing.assert_allclose(state_out, ref["stateN"], rtol=1e-6)
    with pytest.raises(ValueError, match="needs buffers"):
        eng.bind({"input": x}, {})


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is None,
                    reason="TensorRT is not installed (it comes with JetPack on a device); GPU runner not exercised")
def test_tensorrt_runner_needs_a_gpu_before_deserializing(tmp_path):
    from edge_rt.backends.trt import TrtEngine
    from edge_rt.backends.compat import current_environment

    if current_environment() is not None:
        pytest.skip("a GPU is present: the CPU-only refusal is not what runs here")
    plan = tmp_path / "x.plan"
    plan.write_bytes(b"\0" * 16)
    with pytest.raises(TrtError, match="no CUDA GPU"):
        TrtEngine(plan, [])
