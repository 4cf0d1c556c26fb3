"""Export Bergamot tiny11 Marian students (int8 ``.bin``) to ONNX encoder + one-step decoder graphs.

Entry point: :func:`export`, called by ``tools/build_engines.py`` for the ``mt`` stage.
Per pair ``<src>-<tgt>`` it writes::

    <out_dir>/fp32/marian_<pair>_encoder.onnx
    <out_dir>/fp32/marian_<pair>_decoder.onnx
    <out_dir>/assets/mt/<vocab file>            (SentencePiece model, source = target vocab)
    <out_dir>/assets/mt/<shortlist file>        (Marian binary lexical shortlist, if given)

The weights are de-quantised to float32 (``int8 / multiplier``); the graphs' inputs and
outputs are documented in :mod:`edge_rt.stages.mt.marian_io`.

The INT8 twins are made by the build's INT8 step (edge_rt/build/calibration/int8.py: entropy
calibration on decoding of the calibration corpus, static Q/DQ, gated by chrF), which
replaced the dynamic quantisation this exporter used to write (see build_report.md for
the measured comparison). The output projection (a ``Gather`` of shortlisted embedding
rows, then ``Gemm``) stays float32 either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from edge_rt.build.files import copy_file, save_onnx, sha256_file
from edge_rt.build.export.marian_bin import read_marian_bin
from edge_rt.build.export.marian_graph import build_decoder, build_encoder
from edge_rt.errors import PackSpecError
from edge_rt.stages.mt import marian_io as io
MAX_LENGTH_FACTOR = 2.5  # Bergamot config: max-length-factor (target tokens per source token)
SHORTLIST_FIRST = 50  # lex.50.50: always allow the 50 most frequent target ids
SHORTLIST_BEST = 50  # ... and the 50 best translations of each source token (baked into the file)

# Architecture the graphs are written for; any other model.yml is refused.
_EXPECTED_CONFIG = {
    "type": "transformer",
    "dim-emb": str(io.DIM),
    "enc-depth": str(io.ENC_LAYERS),
    "dec-depth": str(io.DEC_LAYERS),
    "transformer-heads": str(io.HEADS),
    "dec-cell": "ssru",
    "transformer-decoder-autoreg": "rnn",
    "transformer-postprocess": "dan",
    "transformer-ffn-activation": "relu",
    "tied-embeddings-all": "true",
}


def export(files: Mapping[str, Path], spec: dict, out_dir: Path) -> dict[str, Any]:
    """Export every pair of ``spec["pairs"]`` and return the manifest entry of the ``mt`` stage.

    Args:
        files: local paths by key ``"<pair>_model"`` (``*.intgemm.alphas.bin``),
            ``"<pair>_vocab"`` (``*.spm``) and optionally ``"<pair>_shortlist"``
            (``lex.*.s2t.bin``), e.g. ``"en-pt_model"``.
        spec: the pack's ``mt`` declaration; ``spec["pairs"]`` lists ``"<src>-<tgt>"``;
            optional ``spec["src_buckets"]`` overrides :data:`marian_io.SRC_BUCKETS`.
        out_dir: the pack directory (``engines/<pack>``); paths in the result are relative to it.

    Returns:
        ``{"kind": "marian", "pairs": [...], "models": {"<pair>/encoder": {"fp32": ...},
        "<pair>/decoder": {...}}, "assets": {"<pair>/vocab": ..., "<pair>/shortlist": ...},
        "src_buckets": [...], "max_length_factor": 2.5, "eos_id": 0, "start_token": -1, ...}``

    Raises:
        PackSpecError: ``spec`` has no pairs, a file is missing, or a model is not a tiny11 student.
    """
    out_dir = Path(out_dir)
    pairs = _pairs(spec)
    buckets = [int(b) for b in spec.get("src_buckets", io.SRC_BUCKETS)]
    if not buckets or any(b <= 1 for b in buckets) or buckets != sorted(set(buckets)):
        raise PackSpecError(f"mt src_buckets must be increasing lengths > 1, not {buckets}")
    entry: dict[str, Any] = {
        "kind": "marian",
        "pairs": pairs,
        "models": {},
        "assets": {},
        "src_buckets": buckets,
        "max_length_factor": float(spec.get("max_length_factor", MAX_LENGTH_FACTOR)),
        "eos_id": io.EOS_ID,
        "start_token": io.START_TOKEN,
        "decoder_layers": io.DEC_LAYERS,
        "dim": io.DIM,
        "shortlist": {"first": SHORTLIST_FIRST, "best": SHORTLIST_BEST},
        "sources": {},
    }
    for pair in pairs:
        model_path = _file(files, pair, "model")
        vocab_path = _file(files, pair, "vocab")
        shortlist_path = _file(files, pair, "shortlist", required=False)
        model = read_marian_bin(model_path)
        _check_config(model.config(), model_path)
        vocab_size = model.tensors["Wemb"].shape[0]

        enc_rel = f"fp32/marian_{pair}_encoder.onnx"
        dec_rel = f"fp32/marian_{pair}_decoder.onnx"
        save_onnx(build_encoder(model.weight), out_dir / enc_rel)
        save_onnx(build_decoder(model.weight), out_dir / dec_rel)
        entry["models"][f"{pair}/encoder"] = {"fp32": enc_rel}
        entry["models"][f"{pair}/decoder"] = {"fp32": dec_rel}

        vocab_rel = f"assets/mt/{vocab_path.name}"
        copy_file(vocab_path, out_dir / vocab_rel)
        entry["assets"][f"{pair}/vocab"] = vocab_rel
        entry["sources"][pair] = {"model": model_path.name, "model_sha256": sha256_file(model_path)}
        if shortlist_path is not None:
            sl_rel = f"assets/mt/{shortlist_path.name}"
            copy_file(shortlist_path, out_dir / sl_rel)
            entry["assets"][f"{pair}/shortlist"] = sl_rel
        entry["vocab_size"] = vocab_size
    return entry


def _pairs(spec: dict) -> list[str]:
    pairs = spec.get("pairs") if isinstance(spec, dict) else None
    if not pairs or not all(isinstance(p, str) and len(p.split("-")) == 2 for p in pairs):
        raise PackSpecError(f'the mt spec needs "pairs" like ["en-pt", "pt-en"], not {pairs!r}')
    return list(pairs)


def _file(files: Mapping[str, Path], pair: str, kind: str, required: bool = True) -> Path | None:
    key = f"{pair}_{kind}"
    if key not in files:
        if not required:
            return None
        raise PackSpecError(f"the mt export needs file {key!r}; given: {sorted(files)}")
    path = Path(files[key])
    if not path.is_file():
        raise PackSpecError(f"the mt file {key!r} does not exist: {path}")
    return path


def _check_config(config: dict[str, str], path: Path) -> None:
    wrong = {k: (config.get(k), v) for k, v in _EXPECTED_CONFIG.items() if config.get(k) != v}
    if wrong:
        detail = ", ".join(f"{k}={got!r} (need {want!r})" for k, (got, want) in wrong.items())
        raise PackSpecError(
            f"{path} is not a Bergamot tiny11 student this exporter supports: {detail}"
        )
