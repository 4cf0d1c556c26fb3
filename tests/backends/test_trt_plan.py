"""The TensorRT runner's pure parts on CPU: profile choice from the ranges the build records, dtypes,
binding checks, what crosses the bus per step, shared memory sizing, cache-slot copies."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edge_rt.backends.trt_plan import (DEVICE_ALIGN, TrtError, check_binding, numpy_dtype, profile_index,
                                       shared_memory_bytes, slot_copy, step_plan)
from edge_rt.build.tensorrt import bucket_bindings, onnx_inputs, profile_shapes
from edge_rt.units import bucket_positions


def _recorded(pack, stage, model):
    """The ``shapes`` the build writes into manifest.json for this model (JSON round trip included)."""
    inputs = onnx_inputs(pack.model(stage, model, "fp32"))
    profiles = [profile_shapes(inputs, b) for b in bucket_bindings(stage, model, pack.stage(stage))]
    return json.loads(json.dumps(profiles))


def test_marian_decoder_shapes_pick_their_source_bucket_within_the_vocab_range(tiny_pack):
    profiles = _recorded(tiny_pack, "mt", "en-pt/decoder")
    buckets = tiny_pack.stage("mt")["src_buckets"]
    for i, src_len in enumerate(buckets):
        shapes = {"prev_token": (1,), "position": (1,), "cross_k": (2, 1, 8, 32, src_len),
                  "cross_v": (2, 1, 8, src_len, 32), "src_mask": (1, src_len), "state": (2, 1, 256),
                  "vocab_ids": (320,)}  # a shortlist of 320 ids: inside [64, 32000]
        assert profile_index(profiles, shapes) == i
    with pytest.raises(TrtError, match="no optimisation profile") as e:
        profile_index(profiles, {"src_mask": (1, 16), "vocab_ids": (40000,)})
    assert "vocab_ids (64,)..(32000,)" in str(e.value) and "--force" in str(e.value)


def test_whisper_decoder_shapes_pick_the_window(tiny_pack):
    profiles = _recorded(tiny_pack, "asr", "decoder")
    windows = sorted(tiny_pack.stage("asr")["buckets_s"])
    last = len(windows) - 1
    shape = lambda s: {"tokens": (1, 1), "cross_k_0": (1, 6, 64, bucket_positions(s))}  # noqa: E731
    assert profile_index(profiles, shape(windows[-1])) == last
    assert profile_index(profiles, shape(windows[0])) == 0
    with pytest.raises(TrtError):
        profile_index(profiles, {"tokens": (1, 2)})  # one token per step


def test_the_tightest_matching_profile_wins():
    wide = {"x": [[1, 1], [1, 64], [1, 4096]]}
    tight = {"x": [[1, 64], [1, 128], [1, 256]]}
    assert profile_index([wide, tight], {"x": (1, 100)}) == 1
    assert profile_index([wide, tight], {"x": (1, 1000)}) == 0
    assert profile_index([tight, wide, tight], {"x": (1, 200)}) == 0  # ties: the first
    with pytest.raises(TrtError, match="no optimisation profile"):
        profile_index([tight], {"x": (1, 100, 1)})  # rank differs
    assert profile_index([{"sr": []}], {"sr": ()}) == 0  # scalar inputs (Silero's sample rate)


def test_dtypes_map_and_unknown_ones_are_named():
    assert numpy_dtype("FLOAT") == np.float32 and numpy_dtype("DataType.HALF") == np.float16
    assert numpy_dtype("INT64") == np.int64 and numpy_dtype("BOOL") == np.bool_
    with pytest.raises(TrtError, match="BF16 has no numpy"):
        numpy_dtype("DataType.BF16")
    with pytest.raises(TrtError, match="unknown"):
        numpy_dtype("COMPLEX")


def test_binding_checks_name_the_tensor():
    a = np.zeros((1, 80, 500), np.float32)
    check_binding("enc.plan", "mel", a, np.dtype(np.float32), (1, 80, 500))
    with pytest.raises(TrtError, match=r"'mel' is float16 in the engine, the buffer is float32"):
        check_binding("enc.plan", "mel", a, np.dtype(np.float16), None)
    with pytest.raises(TrtError, match=r"'cross_k' has shape \(4, 1, 6, 64, 250\)"):
        check_binding("enc.plan", "cross_k", np.zeros((4, 1, 6, 64, 1500), np.float32), np.dtype(np.float32),
                      (4, 1, 6, 64, 250))
    with pytest.raises(TrtError, match="'output' has a data-dependent shape"):  # Piper's waveform length
        check_binding("piper.plan", "output", np.zeros((1, 1, 1, 9), np.float32), np.dtype(np.float32), (1, -1, 1, -1))
    with pytest.raises(TrtError, match="C-contiguous"):
        check_binding("enc.plan", "mel", a[:, :, ::2], np.dtype(np.float32), None)


def test_per_step_traffic_of_the_whisper_decoder():
    ins = ["tokens", "offset", "self_k_0", "self_v_0", "cross_k_0", "cross_v_0"]
    outs = ["logits", "new_k", "new_v"]
    plan = step_plan(ins, outs, external=["cross_k_0", "cross_v_0"], resident=["self_k_0", "self_v_0"],
                     host_outputs=["logits"])
    assert plan.upload == ("tokens", "offset")  # only the small host inputs cross each step
    assert plan.download == ("logits",) and plan.device_only == ("new_k", "new_v")


def test_per_step_traffic_with_carried_state():
    plan = step_plan(["input", "sr", "state"], ["output", "stateN"], carry={"state": "stateN"})
    assert plan.upload == ("input", "sr") and plan.download == ("output",) and plan.carry == (("state", "stateN"),)
    with pytest.raises(TrtError, match="carry 'state' <- 'nope'"):
        step_plan(["state"], ["stateN"], carry={"state": "nope"})
    with pytest.raises(TrtError, match="host output 'x'"):
        step_plan(["a"], ["b"], host_outputs=["x"])
    with pytest.raises(TrtError, match="both carried"):
        step_plan(["state"], ["stateN"], carry={"state": "stateN"}, external=["state"])


def test_one_block_for_the_largest_profile():
    assert shared_memory_bytes([1000, 70_000, 5]) == 70_144 and 70_144 % DEVICE_ALIGN == 0
    assert shared_memory_bytes([]) == 0


def test_slot_copies_write_one_cache_column():
    k = np.zeros((1, 6, 64, 448), np.float32)
    v = np.zeros((1, 6, 448, 64), np.float32)
    new_k = np.arange(6 * 64, dtype=np.float32).reshape(1, 6, 64)
    new_v = -np.arange(6 * 64, dtype=np.float32).reshape(1, 6, 64)
    for cache, new, axis in ((k, new_k, 3), (v, new_v, 2)):
        cp = slot_copy(cache.shape, axis, 17, cache.itemsize)
        flat, src = cache.reshape(-1).view(np.uint8), new.reshape(-1).view(np.uint8)
        for row in range(cp.height):  # what cudaMemcpy2DAsync does
            d, s = cp.dst_offset + row * cp.dst_pitch, row * cp.src_pitch
            flat[d:d + cp.width] = src[s:s + cp.width]
        np.testing.assert_array_equal(np.take(cache, 17, axis=axis), new)
        assert np.count_nonzero(cache) == np.count_nonzero(new)
    with pytest.raises(TrtError, match="outside 0..447"):
        slot_copy(k.shape, 3, 448, 4)


def test_device_aliases_map_a_view_of_an_output_to_its_device_offset():
    """The decoder's cross_k_<i> (a view of one layer of the encoder's cross_k) is read on the device."""
    from edge_rt.backends.trt_plan import DeviceAliases

    class Run:
        def device_address(self, name, offset_bytes=0):
            return {"cross_k": 0x1000_0000}[name] + offset_bytes

    cross_k = np.zeros((6, 1, 8, 64, 250), np.float32)
    aliases = DeviceAliases()
    aliases.add(cross_k, Run(), "cross_k")
    assert aliases.lookup(cross_k[0]) == 0x1000_0000
    assert aliases.lookup(cross_k[3]) == 0x1000_0000 + 3 * cross_k[0].nbytes
    assert aliases.lookup(np.zeros_like(cross_k[0])) is None  # another buffer: uploaded as usual
