"""The device-cache Whisper decoder: the same logits as the exported decoder with host-side cache
writes, and caches returned equal to the host-updated ones (a tiny random Whisper, then the real packs)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from edge_rt.build.export.ct2 import read_ct2
from edge_rt.build.export.whisper import DECODER_DEVICE, export
from edge_rt.build.export.whisper_device import device_cache_decoder, export_device_decoder, resident_pairs
from edge_rt.build.export.whisper_graphs import WhisperDims, decoder_graph
from edge_rt.units import MAX_TEXT_CTX, bucket_frames
from tests.build.export.test_whisper import DEC_LAYERS, HEADS, _tiny_whisper, write_ct2

STEPS = 10
RTOL = 1e-5  # float32 rounding between the two graphs' kernels
LOGITS_ATOL = 1e-4


def _session(model) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def _cache_inputs(session) -> tuple[int, int, int]:
    """(layers, heads, d_head) from a decoder session's inputs."""
    shapes = {i.name: i.shape for i in session.get_inputs()}
    L = sum(1 for n in shapes if n.startswith("self_k_"))
    _, H, dh, _ = shapes["self_k_0"]
    return L, H, dh


def compare_step_by_step(original, device, cross_k: np.ndarray, cross_v: np.ndarray, first_token: int,
                         steps: int = STEPS, stale: float = 1e3) -> list[int]:
    """Greedy-decode ``steps`` tokens with the original graph (host writes ``new_k``/``new_v``) and feed
    the same tokens to the device variant (its caches carried output -> input); asserts equal logits and
    caches at every step. The caches start as ``stale`` garbage, which both must mask. Returns the tokens."""
    L, H, dh = _cache_inputs(original)
    host_k = np.full((L, 1, H, dh, MAX_TEXT_CTX), stale, np.float32)
    host_v = np.full((L, 1, H, MAX_TEXT_CTX, dh), -stale, np.float32)
    dev_k, dev_v = host_k.copy(), host_v.copy()
    cross = {}
    for i in range(L):
        cross |= {f"cross_k_{i}": cross_k[i], f"cross_v_{i}": cross_v[i]}
    names = [o.name for o in device.get_outputs()]
    assert "new_k" not in names and names[0] == "logits"
    tokens = [first_token]
    for offset in range(steps):
        step = {"tokens": np.array([[tokens[-1]]], np.int64), "offset": np.array([offset], np.int64), **cross}
        host_feeds, dev_feeds = dict(step), dict(step)
        for i in range(L):
            host_feeds |= {f"self_k_{i}": host_k[i], f"self_v_{i}": host_v[i]}
            dev_feeds |= {f"self_k_{i}": dev_k[i], f"self_v_{i}": dev_v[i]}
        logits, new_k, new_v = original.run(["logits", "new_k", "new_v"], host_feeds)
        host_k[..., offset], host_v[..., offset, :] = new_k, new_v
        outs = dict(zip(names, device.run(names, dev_feeds)))
        np.testing.assert_allclose(outs["logits"], logits, rtol=RTOL, atol=LOGITS_ATOL, err_msg=f"logits, step {offset}")
        for i in range(L):
            dev_k[i], dev_v[i] = outs[f"self_k_out_{i}"], outs[f"self_v_out_{i}"]
        # Not bit for bit: the original takes a `beams` batch and the variant one sequence, and ONNX Runtime
        # picks kernels by shape; a wrong slot, or a stale one read (+-1e3), is off by far more than rounding.
        np.testing.assert_allclose(dev_k, host_k, rtol=RTOL, atol=1e-5, err_msg=f"self_k after step {offset}")
        np.testing.assert_allclose(dev_v, host_v, rtol=RTOL, atol=1e-5, err_msg=f"self_v after step {offset}")
        tokens.append(int(logits[0].argmax()))
    return tokens


# -- a tiny random Whisper ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory):
    d = tmp_path_factory.mktemp("whisper_device")
    v = _tiny_whisper(np.random.default_rng(0))
    model = read_ct2(write_ct2(d / "model.bin", v, {"decoder/projection/weight": "decoder/embeddings/weight"}))
    dims = WhisperDims.from_ct2(model)
    return decoder_graph(model, dims), dims


def test_tiny_device_decoder_matches_host_cache_writes(tiny_decoder):
    graph, dims = tiny_decoder
    device = device_cache_decoder(graph)
    dh, P = dims.n_text_state // HEADS, bucket_frames(5) // 2
    rng = np.random.default_rng(2)
    cross_k = rng.standard_normal((DEC_LAYERS, 1, HEADS, dh, P)).astype(np.float32)
    cross_v = rng.standard_normal((DEC_LAYERS, 1, HEADS, P, dh)).astype(np.float32)
    compare_step_by_step(_session(graph), _session(device), cross_k, cross_v, first_token=3)


def test_device_decoder_io(tiny_decoder):
    graph, dims = tiny_decoder
    device = device_cache_decoder(graph)
    assert [i.name for i in device.graph.input] == [i.name for i in graph.graph.input]
    outputs = {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in device.graph.output}
    L, H, dh = dims.n_text_layer, dims.n_text_head, dims.n_text_state // dims.n_text_head
    expected = {"logits": [1, dims.n_vocab]}
    for i in range(L):
        expected |= {f"self_k_out_{i}": [1, H, dh, MAX_TEXT_CTX], f"self_v_out_{i}": [1, H, MAX_TEXT_CTX, dh]}
    assert outputs == expected
    assert resident_pairs(L) == {f"self_{c}_{i}": f"self_{c}_out_{i}" for i in range(L) for c in "kv"}
    assert device.opset_import[0].version == graph.opset_import[0].version
    assert not any(n.op_type == "Concat" and n.output[0] in ("new_k", "new_v") for n in device.graph.node)
    assert len(graph.graph.output) == 3  # the input model is left alone


def test_rejects_what_is_not_a_host_cache_decoder(tiny_decoder):
    graph, _ = tiny_decoder
    with pytest.raises(ValueError, match="applied twice"):
        device_cache_decoder(device_cache_decoder(graph))
    no_rows = onnx.ModelProto()
    no_rows.CopyFrom(graph)
    del no_rows.graph.output[1:]
    with pytest.raises(ValueError, match="new_k"):
        device_cache_decoder(no_rows)


def test_export_writes_the_device_decoder(tmp_path):
    v = _tiny_whisper(np.random.default_rng(0))
    files = {"model": write_ct2(tmp_path / "model.bin", v, {"decoder/projection/weight": "decoder/embeddings/weight"}),
             "config": tmp_path / "config.json", "tokenizer": tmp_path / "tokenizer.json"}
    files["config"].write_text(json.dumps({"lang_ids": []}))
    files["tokenizer"].write_text("{}")
    entry = export(files, {"buckets_s": [5]}, tmp_path / "pack")
    assert entry["models"]["decoder_device"] == {"fp32": DECODER_DEVICE}
    outputs = [o.name for o in onnx.load(str(tmp_path / "pack" / DECODER_DEVICE)).graph.output]
    assert outputs[0] == "logits" and "self_v_out_0" in outputs


# -- the real packs -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("pack_name", ["tiny", "default"])
def test_pack_device_decoder_matches_on_real_speech(pack_name, request, speech_dir, tmp_path):
    """Real weights and a real mel window (en_jfk, 15-s bucket), built from the pack's fp32 decoder."""
    import soundfile as sf
    from tokenizers import Tokenizer

    from edge_rt.stages.asr.mel import log_mel, window

    pack = request.getfixturevalue(f"{pack_name}_pack")
    device_path = export_device_decoder(pack.model("asr", "decoder"), tmp_path / "whisper_decoder_device.onnx")
    audio, _ = sf.read(speech_dir / "en_jfk.wav", dtype="float32")
    mel = window(log_mel(audio), 0, bucket_frames(15))
    cross_k, cross_v = _session(pack.model("asr", "encoder")).run(None, {"mel": mel})
    sot = Tokenizer.from_file(str(pack.asset("asr", "tokenizer"))).token_to_id("<|startoftranscript|>")
    tokens = compare_step_by_step(_session(pack.model("asr", "decoder")), _session(device_path),
                                  cross_k, cross_v, first_token=sot)
    assert len(set(tokens)) > 3  # it decoded something, not one token over and over
