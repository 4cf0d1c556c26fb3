"""Smart Turn v3.2 (end-of-turn model): copy its ONNX graph into the pack with a fixed batch of 1.

The graph ships inside ``pipecat-ai`` (only the ``.onnx`` file is unpacked; pipecat is never
imported). Input ``input_features [batch, 80, 800]``: the Whisper log-mel of the last 8 s
(see edge_rt/stages/turn.py); output ``logits [batch, 1]``, which despite its name is already
P(turn complete) (the graph ends in a Sigmoid). The batch dimension is pinned to 1, so the
engine has one static shape.

Not quantized by the build: the "cpu" variant ships as an INT8 Q/DQ graph already (114
DequantizeLinear nodes; no FP32 twin is published in the wheel), and one call is small (~24 ms on
one idle core, /work/shared/docs/FACTS.md), so a second quantization has nothing to gain.
edge_rt/build/calibration/plan.py has no plan for the stage: the INT8 step records it as
"FP32: no INT8 plan" and the "fp32" entry of the manifest means "as shipped".
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import onnx

from edge_rt.build.files import save_onnx
from edge_rt.errors import PackSpecError
from edge_rt.stages.turn import FRAMES, INPUT, MODEL, WINDOW_S
from edge_rt.units import N_MELS, SAMPLE_RATE

OUT = "fp32/smart_turn.onnx"


def _dims(value: onnx.ValueInfoProto) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def check_signature(model: onnx.ModelProto, where: str) -> str | None:
    """Raise :class:`PackSpecError` unless the graph is ``input_features [b, 80, 800] -> [b, 1]`` float32.

    Returns the name of the symbolic batch dimension (None when it is already 1).
    """
    g = model.graph
    expected = f"one float32 input '{INPUT}' [batch, {N_MELS}, {FRAMES}] and one float32 output [batch, 1]"
    found = (f"inputs {[(i.name, _dims(i)) for i in g.input]}, outputs {[(o.name, _dims(o)) for o in g.output]}")
    if len(g.input) != 1 or len(g.output) != 1:
        raise PackSpecError(f"{where} is not a Smart Turn v3 graph: expected {expected}; found {found}. "
                            f"Check files.model in the pack's [stages.turn].")
    inp, out = g.input[0], g.output[0]
    float32 = onnx.TensorProto.FLOAT
    in_dims, out_dims = _dims(inp), _dims(out)
    batch = in_dims[0] if in_dims else None
    ok = (inp.name == INPUT and inp.type.tensor_type.elem_type == float32 and out.type.tensor_type.elem_type == float32
          and len(in_dims) == 3 and in_dims[1:] == [N_MELS, FRAMES] and (batch == 1 or isinstance(batch, str))
          and len(out_dims) == 2 and out_dims[1] == 1 and out_dims[0] in (batch, 1))
    if not ok:
        raise PackSpecError(f"{where} is not a Smart Turn v3 graph: expected {expected}; found {found}. "
                            f"Check files.model in the pack's [stages.turn] (it must be an 8-s, 80-mel v3 model).")
    return batch if isinstance(batch, str) else None


def fix_batch(model: onnx.ModelProto, symbol: str | None) -> onnx.ModelProto:
    """Replace the symbolic batch dimension ``symbol`` by 1 everywhere it appears (in place)."""
    if symbol is None:
        return model
    g = model.graph
    for value in (*g.input, *g.output, *g.value_info):
        for d in value.type.tensor_type.shape.dim:
            if d.dim_param == symbol:
                d.Clear()
                d.dim_value = 1
    return model


def export(files: Mapping[str, Path], spec: dict, out_dir: Path) -> dict:
    """Write ``files["model"]`` with batch 1 to ``out_dir/fp32/smart_turn.onnx``; returns the manifest entry."""
    src = Path(files["model"])
    onnx.checker.check_model(str(src))  # fails loudly on a truncated or foreign file
    model = onnx.load(str(src))
    symbol = check_signature(model, str(src))
    save_onnx(fix_batch(model, symbol), out_dir / OUT)
    return {
        "kind": "smart_turn",
        "models": {MODEL: {"fp32": OUT}},
        "opset": max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "input": INPUT,
        "output": model.graph.output[0].name,
        "window_s": WINDOW_S,
        "frames": FRAMES,
        "sample_rate": SAMPLE_RATE,
        "weights": "int8 Q/DQ as shipped (smart-turn-v3.2-cpu); not re-quantized",
    }
