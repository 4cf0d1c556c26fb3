"""Which models of a pack are quantized, and the recipes tried for each, in order.

A stage's models are matched by :attr:`ModelPlan.pattern`; the build tries a model's
recipes in order until one is not clearly slower than FP32 *and* passes the stage's gate (a recipe with
``try_on_cpu=False`` is only calibrated, for the TensorRT twin). Why each
recipe is what it is: see :mod:`edge_rt.build.calibration.quantize` and the measurements
in ``build_report.md``.

How a recipe is judged (the same in every build, so two builds from the same inputs choose alike):

* *not clearly slower*: the mean over probe inputs of the median paired FP32/INT8 time ratio is at
  least ``Int8Options.min_speedup`` (:mod:`speed`), a floor far from every ratio a kept recipe has
  measured on any machine, so the build machine's CPU does not decide the pack (see the option);
* *accurate*, for the WER gates (Whisper, Piper heard by Whisper): INT8 and FP32 decode the same
  utterances; the 95 % paired-bootstrap interval (fixed seed) of the WER difference must lie below
  the limit (its upper end <= limit: non-inferiority), on >= 2,000 reference words for Whisper;
  a cheap screen on a subset drops only recipes whose interval lies wholly above the limit
  (:mod:`stats`, :mod:`gate`). chrF (Marian) and F1 (Silero) compare point estimates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from edge_rt.build.calibration.audio import AudioRecipe
from edge_rt.build.calibration.calibrate import CalibrationOptions
from edge_rt.build.calibration.quantize import QuantRecipe

__all__ = ["Int8Options", "ModelPlan", "PLAN", "plan_for"]


@dataclass(frozen=True)
class ModelPlan:
    pattern: str  # regular expression on the model name within its stage
    recipes: tuple[QuantRecipe, ...]
    max_samples: int  # calibration calls
    num_bins: int = 512  # entropy histogram bins (finer costs O(bins^2) Python time per tensor)


_DYNAMIC = QuantRecipe("dynamic", mode="dynamic", op_types=("MatMul",), per_channel=False, split_outliers=None)
PLAN: dict[str, tuple[ModelPlan, ...]] = {
    "vad": (ModelPlan(".*", (QuantRecipe("full"),), 3000),),
    "asr": (
        # The two input convs stay float: quantizing them (and the mel input) cost Whisper base
        # 1.4 WER points on the real clips; with them float the gate passes (+0.9). 2048 bins:
        # 512 gave coarser thresholds and +1.9 points (measured 2026-11-29).
        ModelPlan("encoder", (QuantRecipe("no-conv", op_types=("MatMul", "Gemm")),
                              QuantRecipe("no-conv-no-fc2", op_types=("MatMul", "Gemm"), exclude=(r"ffn/linear_1",))),
                  64, num_bins=2048),
        # Static Q/DQ is tried (and measured) first; it has run slower than FP32 on the step decoder.
        # "dynamic-all": every weight MatMul and the tied output projection (a Gemm, most of a step's time:
        # 51865 x 512 weights read per token) in dynamic int8, weights per output channel. Against "dynamic"
        # (MatMuls only, per tensor; the projection float), which packs built before 2026-12-03 chose, on
        # Whisper base (2026-12-03, Xeon with AVX-VNNI): the gate's 2,199 held-out words 18.60 -> 17.51 %
        # either way ([-2.4, +0.05] points), the 463-word screen +0.2 points against +0.9, a decoder step
        # x2.99 of FP32 against x1.3 (8.9 -> 4.1 ms), the decoder's RSS after load 134 -> 59 MB (the
        # projection's pre-packed float copy was 101 MB); the 12 English clips whole, greedy: WER 6.98 ->
        # 5.58 %, decode time x0.67. Tiny passes it too (its gate 22.65 -> 22.42 %). The MatMuls alone and
        # the projection alone stay as fallbacks.
        # Its weights are uint8 (u8 x u8 products): x86 CPUs without VNNI multiply u8 x s8 pairs with VPMADDUBSW,
        # whose 16-bit sums saturate with 8-bit signed weights (ONNX Runtime's quantization docs say so). With
        # int8 weights, builds on an AVX2 EPYC failed the screen (463 words 4.32 -> 8.21 %) and shipped "dynamic"
        # with the projection float (75 MB more after load, steps ~20 % slower). On that machine (2026-12-05):
        # uint8 weights screen 4.32 -> 4.54 %, the gate's 2,199 words 18.60 -> 17.55 % ([-2.5, +0.1] points);
        # 7-bit int8 weights (reduce_range) 4.32 % and 17.69 % ([-2.4, +0.4]), but with them the batched beam
        # dropped four words of de_fleurs_test_009 that one run per hypothesis kept and a spliced hesitation
        # of tests/loop/test_loop.py ended the turn; with uint8 neither. u8 x u8 saturates on no CPU, so a pack
        # built anywhere computes alike (Arm has unsigned dot products; on x86 VNNI it may run slower than
        # u8 x s8 would: not measured).
        ModelPlan("decoder", (QuantRecipe("full", split_outliers=None),
                              QuantRecipe("dynamic-all", mode="dynamic", op_types=("MatMul", "Gemm"),
                                          split_outliers=None, weights="uint8"),
                              _DYNAMIC,
                              QuantRecipe("logits", mode="dynamic", op_types=("Gemm",), split_outliers=None)),
                  96),
    ),
    # Marian: static Q/DQ is entropy-calibrated for the TensorRT twin only. As the CPU engine it ran slower
    # than FP32 wherever it was timed here (mean paired ratio, 2026-12-03, two whole builds of the tiny pack
    # and six runs of the encoder's INT8 step alone: encoders 0.15-0.42, decoders 0.13-0.17), except once:
    # CI's build of 2026-12-03 timed the en-pt encoder's at x0.67, above the 0.6 floor, and shipped it (its
    # dynamic twin runs x1.8-2.4 here), so the MT stage took x3.1 its recorded time (tests/build/
    # test_pack_choices.py and the perf check failed). A timer that close to the floor decides by chance;
    # the plan decides instead. The CPU engine is the dynamic recipe, gated on chrF as before.
    "mt": (
        ModelPlan(r".*/encoder", (QuantRecipe("full", split_outliers=None, try_on_cpu=False), _DYNAMIC), 90),
        ModelPlan(r".*/decoder", (QuantRecipe("full", split_outliers=None, try_on_cpu=False), _DYNAMIC), 200),
    ),
    # Piper: flows and the duration predictor are precision-sensitive (WER 6 -> 11 %) and the
    # vocoder's ConvTranspose has no fused int8 kernel here, so only plain Conv parts are tried.
    "tts": (ModelPlan(".*", (
        QuantRecipe("vocoder-convs", op_types=("Conv",), exclude=(r"^/(enc_p|dp|flow)/",), split_outliers=None),
        QuantRecipe("text-encoder", op_types=("Conv", "MatMul"), exclude=(r"^/(dec|dp|flow)/",), split_outliers=None),
    ), 32),),
}


def plan_for(stage: str, model: str, plan: dict) -> ModelPlan | None:
    """The first plan of ``stage`` whose pattern matches ``model`` (None: the model stays FP32)."""
    return next((p for p in plan.get(stage, ()) if re.fullmatch(p.pattern, model)), None)


@dataclass(frozen=True)
class Int8Options:
    """How the INT8 step runs."""

    enabled: bool = True
    force: bool = False  # redo every stage even when its key is unchanged
    recipe: AudioRecipe = AudioRecipe()
    calibration: CalibrationOptions = CalibrationOptions()
    # Reject INT8 only where it is clearly slower than FP32 on the build machine. Measured mean ratios
    # (FP32 time / INT8 time) in five builds on 2026-12-02: static Q/DQ on the step decoders (Whisper,
    # Marian) 0.04-0.38; every other recipe 0.87-2.31. 0.6 is the middle (geometric) of that gap. The old floor, 1.1,
    # sat inside the spread between machines: the Whisper base encoder measured x1.34-1.38 on a VNNI
    # machine and x0.99-1.02 on an AVX2 EPYC (2026-12-02), so the same inputs gave an INT8 encoder on
    # one and FP32 on the other, and x1.11 kept the decoder in INT8 by 0.01. A pack is built once and
    # runs elsewhere (a Jetson's ARM cores have int8 dot products), so the build machine's speed must not
    # pick its precision; what INT8 gives on every machine is a quarter of the weights' memory.
    min_speedup: float = 0.6
    threads: int = 2  # ONNX Runtime threads for the speed figures
    speech_dir: Path | None = None  # real clips for the Whisper gate (default: gate.speech_dir())
    plan: dict = field(default_factory=lambda: PLAN)
    tensorrt_twins: bool = True  # also write int8_trt/ (symmetric static Q/DQ for TensorRT)
