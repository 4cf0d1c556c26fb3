"""Whisper export: the CTranslate2 reader, a tiny random Whisper checked against a numpy
forward pass, and the static shapes / CTranslate2 agreement of the real packs' graphs."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from edge_rt.build.export.ct2 import Ct2FormatError, read_ct2
from edge_rt.build.export.whisper import export
from edge_rt.units import MAX_TEXT_CTX, bucket_frames

# -- a CTranslate2 model.bin writer (the format in docs/FACTS.md section 2) -------------------
_CODES = {np.dtype(t): code for t, code in (("float32", 0), ("int8", 1), ("int16", 2), ("int32", 3), ("float16", 4))}


def _str(s: str) -> bytes:
    raw = s.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ct2(path: Path, variables: dict[str, np.ndarray], aliases: dict[str, str] = {}, version: int = 6) -> Path:
    out = [struct.pack("<I", version), _str("WhisperSpec"), struct.pack("<I", 3), struct.pack("<I", len(variables))]
    for name, arr in variables.items():
        arr = np.ascontiguousarray(arr)
        out += [_str(name), struct.pack("<B", arr.ndim), struct.pack(f"<{arr.ndim}I", *arr.shape)]
        out += [struct.pack("<BI", _CODES[arr.dtype], arr.nbytes), arr.tobytes()]
    out.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out += [_str(alias), _str(target)]
    path.write_bytes(b"".join(out))
    return path


def test_reader_parses_dtypes_scalars_and_aliases(tmp_path):
    w = np.arange(6, dtype=np.float16).reshape(2, 3)
    path = write_ct2(
        tmp_path / "model.bin",
        {
            "a/weight": w,
            "a/bias": np.array([1.5, -2], np.float32),
            "num_heads": np.array(8, np.int16),
            "act": np.array(3, np.int8),
        },
        {"b/weight": "a/weight"},
    )
    m = read_ct2(path)
    assert (m.spec, m.revision) == ("WhisperSpec", 3)
    assert m["a/weight"].dtype == np.float16 and m["a/weight"].shape == (2, 3)
    np.testing.assert_array_equal(m.f32("b/weight"), w.astype(np.float32))
    assert m.f32("a/bias").tolist() == [1.5, -2.0] and m.scalar("num_heads") == 8 and m.scalar("act") == 3
    with pytest.raises(Ct2FormatError, match="no variable 'missing'"):
        m["missing"]


def test_reader_rejects_other_versions_and_truncation(tmp_path):
    path = write_ct2(tmp_path / "v5.bin", {"x": np.zeros(3, np.float32)}, version=5)
    with pytest.raises(Ct2FormatError, match="binary version 5"):
        read_ct2(path)
    good = write_ct2(tmp_path / "ok.bin", {"x": np.zeros(300, np.float32)}).read_bytes()
    (tmp_path / "cut.bin").write_bytes(good[:100])
    with pytest.raises(Ct2FormatError, match="truncated"):
        read_ct2(tmp_path / "cut.bin")


# -- a tiny random Whisper, exported, against a numpy forward pass ---------------------------
D, HEADS, VOCAB, ENC_LAYERS, DEC_LAYERS, MELS = 16, 2, 64, 1, 2, 80


def _tiny_whisper(rng) -> dict[str, np.ndarray]:
    def w(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float16)

    v = {
        "encoder/num_heads": np.array(HEADS, np.int16),
        "decoder/num_heads": np.array(HEADS, np.int16),
        "decoder/activation": np.array(3, np.int8),
        "decoder/pre_norm": np.array(1, np.int8),
        "decoder/scale_embeddings": np.array(0, np.int8),
        "encoder/conv1/weight": w(D, MELS, 3, scale=0.1),
        "encoder/conv1/bias": w(D),
        "encoder/conv2/weight": w(D, D, 3),
        "encoder/conv2/bias": w(D),
        "encoder/position_encodings/encodings": w(1500, D),
        "encoder/layer_norm/gamma": 1 + w(D),
        "encoder/layer_norm/beta": w(D),
        "decoder/embeddings/weight": w(VOCAB, D),
        "decoder/position_encodings/encodings": w(MAX_TEXT_CTX, D),
        "decoder/layer_norm/gamma": 1 + w(D),
        "decoder/layer_norm/beta": w(D),
    }

    def block(p: str, parts: dict[str, tuple[int, int]]):
        for part, (n_out, n_in) in parts.items():
            v[f"{p}/{part}/weight"], v[f"{p}/{part}/bias"] = w(n_out, n_in), w(n_out)

    for i in range(ENC_LAYERS):
        p = f"encoder/layer_{i}"
        block(p, {
            "self_attention/linear_0": (3 * D, D), "self_attention/linear_1": (D, D),
            "ffn/linear_0": (4 * D, D), "ffn/linear_1": (D, 4 * D),
        })
        for ln in ("self_attention", "ffn"):
            v[f"{p}/{ln}/layer_norm/gamma"], v[f"{p}/{ln}/layer_norm/beta"] = 1 + w(D), w(D)
    for i in range(DEC_LAYERS):
        p = f"decoder/layer_{i}"
        block(p, {
            "self_attention/linear_0": (3 * D, D), "self_attention/linear_1": (D, D),
            "attention/linear_0": (D, D), "attention/linear_1": (2 * D, D), "attention/linear_2": (D, D),
            "ffn/linear_0": (4 * D, D), "ffn/linear_1": (D, 4 * D),
        })
        for ln in ("self_attention", "attention", "ffn"):
            v[f"{p}/{ln}/layer_norm/gamma"], v[f"{p}/{ln}/layer_norm/beta"] = 1 + w(D), w(D)
    return v


_erf = np.vectorize(math.erf)


def _ln(x, p, v):
    g, b = v[f"{p}/gamma"].astype(np.float64), v[f"{p}/beta"].astype(np.float64)
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b


def _lin(x, p, v):
    return x @ v[f"{p}/weight"].astype(np.float64).T + v[f"{p}/bias"].astype(np.float64)


def _attend(q, k, v_, causal=False):
    dh = D // HEADS
    q, k, v_ = (t.reshape(len(t), HEADS, dh).transpose(1, 0, 2) for t in (q, k, v_))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
    if causal:
        s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return (a @ v_).transpose(1, 0, 2).reshape(len(q[0]), D)


def _ffn(x, p, v):
    h = _lin(_ln(x, f"{p}/ffn/layer_norm", v), f"{p}/ffn/linear_0", v)
    return _lin(0.5 * h * (1 + _erf(h / math.sqrt(2))), f"{p}/ffn/linear_1", v)


def _conv(x, p, v, stride):
    w, b = v[f"{p}/weight"].astype(np.float64), v[f"{p}/bias"].astype(np.float64)
    xp = np.pad(x, ((0, 0), (1, 1)))
    n = (xp.shape[1] - 3) // stride + 1
    y = sum(w[:, :, k] @ xp[:, k : k + stride * (n - 1) + 1 : stride] for k in range(3)) + b[:, None]
    return 0.5 * y * (1 + _erf(y / math.sqrt(2)))


def _numpy_whisper(v, mel, tokens):
    """Encoder output and decoder logits for every position of ``tokens`` (float64)."""
    x = _conv(_conv(mel.astype(np.float64), "encoder/conv1", v, 1), "encoder/conv2", v, 2).T
    x = x + v["encoder/position_encodings/encodings"][: len(x)]
    for i in range(ENC_LAYERS):
        p = f"encoder/layer_{i}"
        qkv = _lin(_ln(x, f"{p}/self_attention/layer_norm", v), f"{p}/self_attention/linear_0", v)
        x = x + _lin(_attend(*np.split(qkv, 3, axis=1)), f"{p}/self_attention/linear_1", v)
        x = x + _ffn(x, p, v)
    enc = _ln(x, "encoder/layer_norm", v)
    y = v["decoder/embeddings/weight"][tokens].astype(np.float64)
    y = y + v["decoder/position_encodings/encodings"][: len(tokens)]
    for i in range(DEC_LAYERS):
        p = f"decoder/layer_{i}"
        qkv = _lin(_ln(y, f"{p}/self_attention/layer_norm", v), f"{p}/self_attention/linear_0", v)
        y = y + _lin(_attend(*np.split(qkv, 3, axis=1), causal=True), f"{p}/self_attention/linear_1", v)
        q = _lin(_ln(y, f"{p}/attention/layer_norm", v), f"{p}/attention/linear_0", v)
        k, vv = np.split(_lin(enc, f"{p}/attention/linear_1", v), 2, axis=1)
        y = y + _lin(_attend(q, k, vv), f"{p}/attention/linear_2", v)
        y = y + _ffn(y, p, v)
    return enc, _ln(y, "decoder/layer_norm", v) @ v["decoder/embeddings/weight"].astype(np.float64).T


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    d = tmp_path_factory.mktemp("whisper_export")
    v = _tiny_whisper(np.random.default_rng(0))
    files = {
        "model": write_ct2(d / "model.bin", v, {"decoder/projection/weight": "decoder/embeddings/weight"}),
        "config": d / "config.json",
        "tokenizer": d / "tokenizer.json",
    }
    files["config"].write_text(json.dumps({"lang_ids": [], "suppress_ids": [], "suppress_ids_begin": []}))
    files["tokenizer"].write_text("{}")
    entry = export(files, {"buckets_s": [5, 30]}, d / "pack")
    return v, entry, d / "pack"


def _session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def test_manifest_entry_of_export(tiny_export):
    _, entry, out = tiny_export
    assert entry["kind"] == "whisper" and entry["buckets_s"] == [5, 30]
    assert entry["dims"] == {
        "n_mels": MELS, "n_vocab": VOCAB,
        "n_audio_ctx": 1500, "n_audio_state": D, "n_audio_head": HEADS, "n_audio_layer": ENC_LAYERS,
        "n_text_ctx": MAX_TEXT_CTX, "n_text_state": D, "n_text_head": HEADS, "n_text_layer": DEC_LAYERS,
    }
    assert entry["multilingual"] is False and entry["languages"] == ["en"]
    for rel in [*(m["fp32"] for m in entry["models"].values()), *entry["assets"].values()]:
        assert not Path(rel).is_absolute() and (out / rel).is_file()


def test_exported_graphs_equal_numpy_whisper(tiny_export):
    """Encoder at the 5-s bucket, then 6 one-step decoder calls through the 448-slot cache."""
    v, entry, out = tiny_export
    frames = bucket_frames(5)
    mel = np.random.default_rng(1).standard_normal((1, MELS, frames)).astype(np.float32)
    tokens = [3, 17, 5, 60, 2, 9]
    enc_ref, logits_ref = _numpy_whisper(v, mel[0], tokens)

    cross_k, cross_v = _session(out / entry["models"]["encoder"]["fp32"]).run(None, {"mel": mel})
    dh, P = D // HEADS, frames // 2
    assert cross_k.shape == (DEC_LAYERS, 1, HEADS, dh, P) and cross_v.shape == (DEC_LAYERS, 1, HEADS, P, dh)
    k_ref = (enc_ref @ v["decoder/layer_0/attention/linear_1/weight"].astype(np.float64).T)[:, :D]
    k_ref = k_ref + v["decoder/layer_0/attention/linear_1/bias"][:D]
    np.testing.assert_allclose(cross_k[0, 0], k_ref.reshape(P, HEADS, dh).transpose(1, 2, 0), atol=2e-4, rtol=1e-3)

    dec = _session(out / entry["models"]["decoder"]["fp32"])
    self_k = np.full((DEC_LAYERS, 1, HEADS, dh, MAX_TEXT_CTX), 1e3, np.float32)  # stale garbage must be masked
    self_v = np.full((DEC_LAYERS, 1, HEADS, MAX_TEXT_CTX, dh), -1e3, np.float32)
    for offset, token in enumerate(tokens):
        feeds = {"tokens": np.array([[token]], np.int64), "offset": np.array([offset], np.int64)}
        for i in range(DEC_LAYERS):
            feeds |= {f"self_k_{i}": self_k[i], f"self_v_{i}": self_v[i]}
            feeds |= {f"cross_k_{i}": cross_k[i], f"cross_v_{i}": cross_v[i]}
        logits, new_k, new_v = dec.run(None, feeds)
        self_k[..., offset], self_v[..., offset, :] = new_k, new_v
        assert logits.shape == (1, VOCAB)
        np.testing.assert_allclose(logits[0], logits_ref[offset], atol=2e-4, rtol=1e-3)


def test_encoder_attention_in_chunks_equals_it_whole(tiny_export, tmp_path):
    """Self-attention in runs of query positions (``ATTENTION_CHUNKS``) gives the one-piece graph's outputs
    bit for bit, at windows whose positions 5 divides and one it does not."""
    import onnx

    from edge_rt.build.export.whisper_graphs import ATTENTION_CHUNKS, WhisperDims, encoder_graph
    from edge_rt.build.files import save_onnx

    _, entry, out = tiny_export
    model = read_ct2(out.parent / "model.bin")
    dims = WhisperDims.from_ct2(model)
    whole = _session(save_onnx(encoder_graph(model, dims, attention_chunks=1), tmp_path / "whole.onnx"))
    chunked = _session(out / entry["models"]["encoder"]["fp32"])
    graph = onnx.load(str(out / entry["models"]["encoder"]["fp32"])).graph
    softmaxes = [n for n in graph.node if n.op_type == "Softmax"]
    assert ATTENTION_CHUNKS > 1 and len(softmaxes) == ENC_LAYERS * ATTENTION_CHUNKS
    # Each chunk's query slice depends on the previous chunk's softmax: any valid node order (ONNX Runtime's
    # quantizer writes them breadth first) computes the chunks one after the other, so one chunk's scores
    # are alive at a time.
    made_by = {o: n for n in graph.node for o in n.output}

    def ancestors(node, seen):
        for i in node.input:
            if i in made_by and made_by[i].name not in seen:
                seen.add(made_by[i].name)
                ancestors(made_by[i], seen)
        return seen

    slices = [n for n in graph.node if ".q_chunk" in n.name and n.name.startswith("encoder/layer_0/")]
    assert len(slices) == ATTENTION_CHUNKS
    for before, after in zip(softmaxes, slices[1:]):
        assert before.name in ancestors(after, set()), (before.name, after.name)
    rng = np.random.default_rng(2)
    for frames in (bucket_frames(5), bucket_frames(5) + 2, bucket_frames(30)):  # 250, 251 and 1500 positions
        mel = rng.standard_normal((1, MELS, frames)).astype(np.float32)
        for got, want in zip(chunked.run(None, {"mel": mel}), whole.run(None, {"mel": mel})):
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)


# -- the real packs ---------------------------------------------------------------------------
def _shapes(path: Path) -> dict[str, list]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return {
        vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        for vi in [*graph.input, *graph.output]
    }


@pytest.mark.parametrize("pack_name", ["tiny", "default"])
def test_pack_graphs_are_static_but_for_the_window(pack_name, request):
    pack = request.getfixturevalue(f"{pack_name}_pack")
    entry = pack.stage("asr")
    dims = entry["dims"]
    L, H, dh = dims["n_text_layer"], dims["n_text_head"], dims["n_text_state"] // dims["n_text_head"]
    enc = _shapes(pack.model("asr", "encoder"))
    assert enc == {
        "mel": [1, 80, "frames"],
        "cross_k": [L, 1, H, dh, "positions"],
        "cross_v": [L, 1, H, "positions", dh],
    }
    dec = _shapes(pack.model("asr", "decoder"))  # "beams": 1 greedy, the beam width for beam search
    assert dec["tokens"] == ["beams", 1] and dec["offset"] == [1] and dec["logits"] == ["beams", dims["n_vocab"]]
    assert dec["new_k"] == dec["new_v"] == [L, "beams", H, dh]
    for i in range(L):
        assert dec[f"self_k_{i}"] == ["beams", H, dh, MAX_TEXT_CTX]
        assert dec[f"self_v_{i}"] == ["beams", H, MAX_TEXT_CTX, dh]
        assert dec[f"cross_k_{i}"] == [1, H, dh, "positions"] and dec[f"cross_v_{i}"] == [1, H, "positions", dh]
    symbolic = {d for shape in dec.values() for d in shape if isinstance(d, str)}
    assert symbolic == {"positions", "beams"}
    assert entry["io"]["decoder"]["inputs"]["tokens"] == ["beams", 1]  # what the runtime reads (stages/asr/whisper.py)
    device = _shapes(pack.model("asr", "decoder_device"))  # one sequence: beam search runs on the host
    assert device["tokens"] == [1, 1] and device["self_k_out_0"] == [1, H, dh, MAX_TEXT_CTX]
    assert entry["buckets_s"] == [5, 10, 15, 20, 30]
    assert entry["multilingual"] is (pack_name == "default")


def test_tiny_encoder_matches_ctranslate2(tiny_pack, speech_dir, tmp_path):
    """Cross-attention K/V of the exported encoder vs CTranslate2's encoder output (same weights, float32)."""
    import ctranslate2
    import soundfile as sf

    from edge_rt.stages.asr.mel import log_mel, window
    from tests.whisper_reference import ct2_model_dir, raw_asr_files

    files = raw_asr_files("tiny")
    dims = tiny_pack.stage("asr")["dims"]
    model = ctranslate2.models.Whisper(
        str(ct2_model_dir(files, dims["n_vocab"], tmp_path)), device="cpu", compute_type="float32", intra_threads=2
    )
    audio, _ = sf.read(speech_dir / "en_jfk.wav", dtype="float32")
    mel = window(log_mel(audio), 0, bucket_frames(30))
    enc = np.array(model.encode(ctranslate2.StorageView.from_array(mel), to_cpu=True))[0]
    cross_k, cross_v = _session(tiny_pack.model("asr", "encoder")).run(None, {"mel": mel})
    m = read_ct2(files["model"])
    L, H, d = dims["n_text_layer"], dims["n_text_head"], dims["n_text_state"]
    for i in range(L):
        p = f"decoder/layer_{i}/attention/linear_1"
        kv = enc @ m.f32(f"{p}/weight").T + m.f32(f"{p}/bias")
        k = kv[:, :d].reshape(-1, H, d // H).transpose(1, 2, 0)
        v = kv[:, d:].reshape(-1, H, d // H).transpose(1, 0, 2)
        np.testing.assert_allclose(cross_k[i, 0], k, atol=2e-4)
        np.testing.assert_allclose(cross_v[i, 0], v, atol=2e-4)
