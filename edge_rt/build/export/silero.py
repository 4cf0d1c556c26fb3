"""Silero VAD needs no conversion: copy the If-free ONNX graph into the pack."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import onnx

from edge_rt.build.files import copy_file

OUT = "fp32/silero_vad.onnx"


def export(files: Mapping[str, Path], spec: dict, out_dir: Path) -> dict:
    """Copy ``files["model"]`` to ``out_dir/fp32/silero_vad.onnx``; returns the manifest entry."""
    src = Path(files["model"])
    onnx.checker.check_model(str(src))  # fails loudly on a truncated or foreign file
    copy_file(src, out_dir / OUT)
    model = onnx.load(str(src), load_external_data=False)
    return {
        "kind": "silero",
        "models": {"silero": {"fp32": OUT}},
        "opset": max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "frame": 512,
        "context": 64,
        "sample_rate": 16000,
    }
