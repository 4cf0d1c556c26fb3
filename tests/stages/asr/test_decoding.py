"""WhisperInference over the device-cache decoder (caches bound ``device_resident``) vs the exported
decoder with host-side cache writes: the same logits, step by step, on real weights and speech."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from edge_rt.backends.ort import OrtEngine, SessionOptions
from edge_rt.build.export.whisper_device import export_device_decoder
from edge_rt.stages.asr.decoding import WhisperInference
from edge_rt.stages.asr.mel import log_mel, window
from edge_rt.units import bucket_frames

STEPS = 10


class _Recording:
    """An engine that records the keywords of every ``bind`` (the contract the stage uses)."""

    def __init__(self, engine):
        self.engine, self.binds = engine, []
        self.input_names, self.output_names = engine.input_names, engine.output_names

    def bind(self, inputs, outputs, **kw):
        self.binds.append((set(outputs), kw))
        return self.engine.bind(inputs, outputs, **kw)


@pytest.mark.slow
def test_device_cache_decoder_gives_the_host_cache_logits(tiny_pack, speech_dir, tmp_path):
    from tokenizers import Tokenizer

    entry = tiny_pack.stage("asr")
    opts = SessionOptions(intra_op_threads=2)
    encoder = OrtEngine(tiny_pack.model("asr", "encoder"), opts)
    host = WhisperInference(encoder, OrtEngine(tiny_pack.model("asr", "decoder"), opts), entry["dims"])
    device_path = export_device_decoder(tiny_pack.model("asr", "decoder"), tmp_path / "whisper_decoder_device.onnx")
    recorded = _Recording(OrtEngine(device_path, opts))
    device = WhisperInference(encoder, recorded, entry["dims"])
    assert device.device_cache and not host.device_cache

    audio, _ = sf.read(speech_dir / "en_jfk.wav", dtype="float32")
    mel = window(log_mel(audio), 0, bucket_frames(15))
    token = Tokenizer.from_file(str(tiny_pack.asset("asr", "tokenizer"))).token_to_id("<|startoftranscript|>")
    for inference in (host, device):
        inference.self_k.fill(1e3)  # stale values from an earlier window must stay masked
        inference.self_v.fill(-1e3)
        inference.encode(mel)
    picked = []
    for offset in range(STEPS):
        want = host.step(token, offset).copy()
        got = device.step(token, offset)
        # rtol 1e-5: float32 rounding; the host graph takes a `beams` batch, the device one is pinned to one
        # sequence, and ONNX Runtime picks kernels by shape (1.05e-5 at logits of ~9 after that change).
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=f"step {offset}")
        token = int(want.argmax())
        picked.append(token)
    assert len(set(picked)) > 3
    # On ONNX Runtime the carried caches are host arrays: the written slots equal the host writes (to float32
    # rounding: the two graphs' kernels differ, see above).
    np.testing.assert_allclose(device.self_k[..., :STEPS], host.self_k[..., :STEPS], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(device.self_v[..., :STEPS, :], host.self_v[..., :STEPS, :], rtol=1e-5, atol=1e-5)
    (outputs, kw), = recorded.binds
    n = entry["dims"]["n_text_layer"]
    assert outputs == {"logits"} | {f"self_{c}_out_{i}" for i in range(n) for c in "kv"}
    assert kw["host_outputs"] == ["logits"] and kw["device_resident"]["self_v_0"] == "self_v_out_0"


@pytest.mark.slow
def test_the_window_buckets_share_one_cross_attention_buffer(tiny_pack, speech_dir):
    """Each bucket's cross K/V are the front of one buffer: a long window written in between changes nothing
    in a short one encoded again, and the buckets hold one window's worth, not one each."""
    from tokenizers import Tokenizer

    entry = tiny_pack.stage("asr")
    opts = SessionOptions(intra_op_threads=2)
    inference = WhisperInference(OrtEngine(tiny_pack.model("asr", "encoder"), opts),
                                 OrtEngine(tiny_pack.model("asr", "decoder"), opts), entry["dims"])
    token = Tokenizer.from_file(str(tiny_pack.asset("asr", "tokenizer"))).token_to_id("<|startoftranscript|>")
    jfk, _ = sf.read(speech_dir / "en_jfk.wav", dtype="float32")
    other, _ = sf.read(speech_dir / "de_fleurs_test_009.wav", dtype="float32")

    def greedy(mel):
        inference.encode(mel)
        tok, out = token, []
        for offset in range(STEPS):
            logits = inference.step(tok, offset)
            out.append(logits.copy())
            tok = int(logits.argmax())
        return np.stack(out)

    short, long = bucket_frames(10), bucket_frames(30)
    first = greedy(window(log_mel(jfk), 0, short))
    greedy(window(log_mel(other), 0, long))  # overwrites the buffer's front with other speech
    np.testing.assert_array_equal(greedy(window(log_mel(jfk), 0, short)), first)
    for a, b in zip(inference.cross(short), inference.cross(long)):
        assert np.shares_memory(a, b) and a.flags.c_contiguous
    with pytest.raises(ValueError, match="n_audio_ctx"):
        inference.mel_buffer(long + 2)
