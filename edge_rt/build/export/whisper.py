"""Build step: CTranslate2 Whisper ``model.bin`` -> static-shape ONNX encoder + one-step decoder.

``tools/build_engines.py`` calls :func:`export` once per pack; the graphs are
described in :mod:`edge_rt.build.export.whisper_graphs`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from edge_rt.build.export.ct2 import read_ct2
from edge_rt.build.files import copy_file, save_onnx
from edge_rt.build.export.graph import OPSET
from edge_rt.build.export.whisper_device import device_cache_decoder
from edge_rt.build.export.whisper_graphs import BEAMS, WhisperDims, decoder_graph, encoder_graph
from edge_rt.errors import PackSpecError
from edge_rt.stages.asr.tokenizer import language_codes
from edge_rt.units import MAX_TEXT_CTX, WHISPER_BUCKETS_S, bucket_positions

KIND = "whisper"
ENCODER = "fp32/whisper_encoder.onnx"
DECODER = "fp32/whisper_decoder.onnx"
DECODER_DEVICE = "fp32/whisper_decoder_device.onnx"  # updates its own caches: for GPUs (issue 12)
TOKENIZER = "assets/asr/tokenizer.json"
CONFIG = "assets/asr/config.json"
REQUIRED_FILES = ("model", "config", "tokenizer")
MULTILINGUAL_MIN_VOCAB = 51865  # OpenAI's rule: the English-only models have 51864 tokens


def _buckets(spec: Mapping[str, Any], n_audio_ctx: int) -> list[int]:
    buckets = sorted(int(s) for s in spec.get("buckets_s", WHISPER_BUCKETS_S))
    bad = [s for s in buckets if s <= 0 or bucket_positions(s) > n_audio_ctx]
    if not buckets or bad:
        raise PackSpecError(
            f"stages.asr.buckets_s = {buckets}: every bucket must be a positive number of seconds whose "
            f"encoder positions fit Whisper's {n_audio_ctx} (at most 30 s); e.g. {list(WHISPER_BUCKETS_S)}"
        )
    return buckets


def _languages(config: Mapping[str, Any], tokenizer_path: Path, multilingual: bool) -> list[str]:
    """Language codes the model accepts, from ``config.json``'s ``lang_ids`` and the tokenizer."""
    if not multilingual:
        return ["en"]
    from tokenizers import Tokenizer

    return language_codes(Tokenizer.from_file(str(tokenizer_path)), config.get("lang_ids", []))


def _io(dims: WhisperDims) -> dict[str, Any]:
    """The graphs' I/O in words, for the runtime and the TensorRT build (L layers, H heads, dh = d / H)."""
    L, H, dh = dims.n_text_layer, dims.n_text_head, dims.n_text_state // dims.n_text_head
    return {
        "encoder": {
            "inputs": {"mel": [1, dims.n_mels, "frames"]},
            "outputs": {"cross_k": [L, 1, H, dh, "positions"], "cross_v": [L, 1, H, "positions", dh]},
        },
        "decoder": {
            "inputs": {
                "tokens": [BEAMS, 1],
                "offset": [1],
                "self_k_<i>": [BEAMS, H, dh, MAX_TEXT_CTX],
                "self_v_<i>": [BEAMS, H, MAX_TEXT_CTX, dh],
                "cross_k_<i>": [1, H, dh, "positions"],
                "cross_v_<i>": [1, H, "positions", dh],
            },
            "outputs": {"logits": [BEAMS, dims.n_vocab], "new_k": [L, BEAMS, H, dh], "new_v": [L, BEAMS, H, dh]},
        },
        "decoder_device": {  # the decoder's inputs; bind self_*_<i> device_resident <- self_*_out_<i>
            "outputs": {"logits": [1, dims.n_vocab], "self_k_out_<i>": [1, H, dh, MAX_TEXT_CTX],
                        "self_v_out_<i>": [1, H, MAX_TEXT_CTX, dh]},
        },
    }


def export(files: Mapping[str, Path], spec: Mapping[str, Any], out_dir: Path) -> dict[str, Any]:
    """Export one Whisper model into a pack directory.

    Args:
        files: local paths by logical name: ``model`` (CTranslate2 ``model.bin``, float16 or
            float32), ``config`` (its ``config.json``), ``tokenizer`` (``tokenizer.json``).
        spec: the pack's ``[stages.asr]`` table; reads ``buckets_s`` (list of seconds).
        out_dir: ``engines/<pack>``; writes ``fp32/whisper_{encoder,decoder}.onnx`` (weights
            widened to float32), ``fp32/whisper_decoder_device.onnx`` (the decoder that updates
            its own caches, :mod:`edge_rt.build.export.whisper_device`) and
            ``assets/asr/{tokenizer,config}.json``.

    Returns:
        The manifest's ``asr`` entry; every path in it is relative to ``out_dir``.
    """
    missing = [k for k in REQUIRED_FILES if k not in files]
    if missing:
        raise PackSpecError(f"stages.asr.files lacks {missing}; a Whisper stage needs {list(REQUIRED_FILES)}")
    out_dir = Path(out_dir)
    model = read_ct2(files["model"])
    dims = WhisperDims.from_ct2(model)
    buckets = _buckets(spec, dims.n_audio_ctx)
    config = json.loads(Path(files["config"]).read_text())
    multilingual = dims.n_vocab >= MULTILINGUAL_MIN_VOCAB

    save_onnx(encoder_graph(model, dims), out_dir / ENCODER)
    decoder = decoder_graph(model, dims)
    save_onnx(decoder, out_dir / DECODER)
    save_onnx(device_cache_decoder(decoder), out_dir / DECODER_DEVICE)
    copy_file(files["tokenizer"], out_dir / TOKENIZER)
    copy_file(files["config"], out_dir / CONFIG)
    return {
        "kind": KIND,
        "models": {"encoder": {"fp32": ENCODER}, "decoder": {"fp32": DECODER},
                   "decoder_device": {"fp32": DECODER_DEVICE}},
        "assets": {"tokenizer": TOKENIZER, "config": CONFIG},
        "buckets_s": buckets,
        "dims": dims.as_dict(),
        "multilingual": multilingual,
        "languages": _languages(config, Path(files["tokenizer"]), multilingual),
        "opset": OPSET,
        "io": _io(dims),
    }
