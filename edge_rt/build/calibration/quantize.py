"""Static INT8 quantization to Q/DQ ONNX with calibrated ranges (ONNX Runtime ``quantize_static``).

A :class:`QuantRecipe` says which nodes become int8 and how. The defaults come from
measurements on this project's graphs (2 cores, AVX-512 VNNI, ONNX Runtime 1.32):

* weights int8 per output channel; activations **int8** (S8S8 GEMMs ran 1.6x faster than
  U8S8 here: 1.4 ms vs 2.3 ms for a 1000x512x2048 MatMul; fp32: 6.3 ms);
* MatMul outputs are *not* quantized, so ONNX Runtime fuses ``DQ -> MatMul`` into
  ``MatMulIntegerToFloat`` (float out, no requantize + dequantize round trip);
* only MatMul/Gemm with a weight, Conv and ConvTranspose are quantized: activation x
  activation MatMuls (attention scores) stayed slower as ``QLinearMatMul`` + ``QLinearSoftmax``
  and hurt WER; LayerNorm, Softmax and GELU paths stay float;
* outlier channels are split off first (:mod:`edge_rt.build.calibration.outliers`).

``mode="dynamic"`` (int8 weights, activation ranges computed per call: ``quantize_dynamic``)
is the measured exception for the one-token step decoders and Marian: ONNX Runtime 1.32
did not fuse their static Q/DQ MatMuls (LayerNorm outputs shared with a residual Add, the
tied-embedding ``Gemm``), so every call dequantized the weights again and static INT8 ran
2-9x *slower* than FP32, while dynamic INT8 ran 1.6-2.8x faster (numbers in build_report.md).
ONNX Runtime's dynamic quantizer has no ``Gemm``: a selected ``Gemm`` (Whisper's tied output
projection, 69 % of a decoder step) is first rewritten as ``MatMul`` by a transposed copy of
its weight (:func:`gemm_as_matmul`), which the quantizer then stores as int8; a weight that
other nodes read too (the token embedding's ``Gather``) keeps its float original for them.

``symmetric=True`` is the TensorRT form (issue 12): TensorRT's explicit quantization accepts
only INT8 Q/DQ with zero point 0, so activations *and* weights are symmetric, weights per
channel, biases stay float (an INT32 bias ``DequantizeLinear`` is not INT8) and only the
inputs of MatMul/Gemm/Conv get Q/DQ, where TensorRT fuses them into its INT8 kernels.
:func:`trt_qdq_problems` checks a model for exactly that.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from edge_rt.atomic import atomic_write
from edge_rt.build.calibration.calibrate import Calibration
from edge_rt.errors import EdgeRtError

__all__ = ["QuantizationError", "QuantRecipe", "select_nodes", "tensors_to_calibrate", "quantize", "check_onnx",
           "gemm_as_matmul", "trt_qdq_problems"]


class QuantizationError(EdgeRtError, ValueError):
    """A model could not be quantized (corrupt input, no quantizable node, the result does not load)."""


@dataclass(frozen=True)
class QuantRecipe:
    """One way to quantize one model; the build tries a model's recipes in order until one passes its gate."""

    name: str  # e.g. "full", "no-logits"
    mode: str = "static"  # "static" (entropy-calibrated Q/DQ) | "dynamic" (per-call activation ranges)
    op_types: tuple[str, ...] = ("MatMul", "Gemm", "Conv", "ConvTranspose")
    exclude: tuple[str, ...] = ()  # regular expressions on node names kept in float
    activations: str = "int8"  # "int8" | "uint8"
    # The weights' type in a dynamic recipe: "int8" (u8 x s8 products) | "uint8" (u8 x u8). x86 CPUs without VNNI
    # sum u8 x s8 pairs in 16 bits (VPMADDUBSW), which 8-bit weights can saturate; u8 x u8 is summed in 32 bits.
    weights: str = "int8"
    per_channel: bool = True
    reduce_range: bool = False  # 7-bit weights: for CPUs without VNNI (overflow in U8S8 on AVX2)
    quantize_outputs: tuple[str, ...] = ("Conv", "ConvTranspose")  # op types whose outputs get Q/DQ (QLinearConv)
    split_outliers: float | None = 8.0  # outlier ratio (see outliers.py); None = no split
    max_outliers: int = 32
    symmetric: bool = False  # zero point 0 everywhere and float biases: the TensorRT (explicit Q/DQ) form
    # False: the recipe is calibrated (its entropy ranges and nodes feed the TensorRT twin) but never tried as the
    # ONNX Runtime CPU engine, because it is known to run slower than FP32 there (see the plan's comment). A build
    # then does not let its timer decide what a plan can decide once.
    try_on_cpu: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ("static", "dynamic"):
            raise ValueError(f"QuantRecipe.mode must be 'static' or 'dynamic', not {self.mode!r}")
        if self.activations not in ("int8", "uint8"):
            raise ValueError(f"QuantRecipe.activations must be 'int8' or 'uint8', not {self.activations!r}")
        if self.weights not in ("int8", "uint8") or (self.weights == "uint8" and self.mode != "dynamic"):
            raise ValueError(f"QuantRecipe.weights must be 'int8', or 'uint8' in a dynamic recipe, not "
                             f"{self.weights!r} (mode={self.mode!r})")
        if self.symmetric and (self.mode != "static" or self.activations != "int8" or self.reduce_range):
            raise ValueError("QuantRecipe.symmetric (TensorRT) needs mode='static', activations='int8' and no "
                             f"reduce_range, not mode={self.mode!r}, activations={self.activations!r}, "
                             f"reduce_range={self.reduce_range}")
        for pat in self.exclude:
            try:
                re.compile(pat)
            except re.error as e:
                raise ValueError(f"QuantRecipe.exclude pattern {pat!r} is not a regular expression: {e}") from e

    def as_dict(self) -> dict:
        return asdict(self)


def check_onnx(path: Path, what: str = "model"):
    """Load and check an ONNX file; raises :class:`QuantizationError` naming it (truncated, corrupt)."""
    import onnx

    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:  # onnx raises DecodeError, ValidationError, OSError ...
        raise QuantizationError(
            f"the {what} {path} is not a valid ONNX model ({type(e).__name__}: {e}); it is truncated or corrupt: "
            f"rebuild it with `python tools/build_engines.py --pack <name> --force`"
        ) from e
    return model


def select_nodes(model, recipe: QuantRecipe, keep_float: tuple[str, ...] = ()) -> list[str]:
    """Names of the nodes ``recipe`` quantizes in ``model``."""
    inits = {i.name for i in model.graph.initializer}
    pats = [re.compile(p) for p in recipe.exclude]
    out = []
    for n in model.graph.node:
        if n.op_type not in recipe.op_types or n.name in keep_float:
            continue
        if n.op_type in ("MatMul", "Gemm") and (len(n.input) < 2 or n.input[1] not in inits):
            continue  # activation x activation
        if any(p.search(n.name) for p in pats):
            continue
        out.append(n.name)
    return out


def tensors_to_calibrate(model, nodes: list[str], recipe: QuantRecipe) -> set[str]:
    """Float activations the quantizer needs ranges for: inputs of ``nodes``, and outputs where quantized."""
    inits = {i.name for i in model.graph.initializer}
    wanted = set(nodes)
    out: set[str] = set()
    for n in model.graph.node:
        if n.name not in wanted:
            continue
        out.add(n.input[0])
        if n.op_type in recipe.quantize_outputs:
            out.update(n.output)
    return {t for t in out if t and t not in inits}


def quantize(model_path: Path, calibration: Calibration | None, nodes: list[str], recipe: QuantRecipe,
             out_path: Path) -> Path:
    """Write the INT8 model of ``model_path`` to ``out_path`` atomically; returns ``out_path``.

    ``calibration`` is required for ``mode="static"`` and ignored for ``"dynamic"``.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.calibrate import save_tensors_data

    check_onnx(Path(model_path), "model to quantize")
    if not nodes:
        raise QuantizationError(f"recipe {recipe.name!r} selects no node of {model_path.name} to quantize")
    if recipe.mode == "dynamic":
        import onnx

        model = onnx.load(str(model_path))
        gemm_as_matmul(model, nodes)
        with tempfile.TemporaryDirectory(prefix="edge_rt_quant_") as tmp:
            src = Path(tmp) / model_path.name
            onnx.save(model, str(src))
            try:
                atomic_write(out_path, lambda dst: quantize_dynamic(
                    str(src), str(dst), weight_type=QuantType.QUInt8 if recipe.weights == "uint8" else QuantType.QInt8,
                    per_channel=recipe.per_channel, reduce_range=recipe.reduce_range, nodes_to_quantize=nodes,
                    op_types_to_quantize=["MatMul"]))
            except (ValueError, KeyError, RuntimeError) as e:
                raise QuantizationError(f"dynamic quantization of {model_path.name} failed: {e}") from e
        check_onnx(out_path, "quantized model")
        return out_path
    if calibration is None:
        raise QuantizationError(f"recipe {recipe.name!r} is static and needs a calibration")
    excluded_outputs = [t for t in ("MatMul", "Gemm", "Conv", "ConvTranspose") if t not in recipe.quantize_outputs]
    act = QuantType.QInt8 if recipe.activations == "int8" else QuantType.QUInt8
    with tempfile.TemporaryDirectory(prefix="edge_rt_quant_") as tmp:
        cache = Path(tmp) / "ranges.json"
        save_tensors_data(calibration.tensors_data(), cache)

        def write(dst: Path) -> None:
            quantize_static(
                str(model_path), str(dst), None,
                quant_format=QuantFormat.QDQ, per_channel=recipe.per_channel, reduce_range=recipe.reduce_range,
                activation_type=act, weight_type=QuantType.QInt8, nodes_to_quantize=nodes,
                op_types_to_quantize=list(recipe.op_types), calibrate_method=CalibrationMethod.Entropy,
                calibration_cache_path=str(cache),
                extra_options={"OpTypesToExcludeOutputQuantization": excluded_outputs, "DedicatedQDQPair": True,
                               **(_SYMMETRIC_OPTIONS if recipe.symmetric else {})},
            )

        try:
            atomic_write(out_path, write)
        except (ValueError, KeyError, RuntimeError) as e:
            raise QuantizationError(f"quantizing {model_path.name} with recipe {recipe.name!r} failed: {e}") from e
    check_onnx(out_path, "quantized model")
    return out_path


# quantize_static's extra options for the TensorRT form (see the module docstring)
_SYMMETRIC_OPTIONS = {"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False}


def _constant(model, name: str):
    """The numpy value of an initializer or ``Constant`` node output ``name``, or None."""
    from onnx import helper, numpy_helper

    for init in model.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output[0] == name:
            value = next((a for a in n.attribute if a.name == "value"), None)
            return None if value is None else numpy_helper.to_array(helper.get_attribute_value(value))
    return None


def trt_qdq_problems(model) -> list[str]:
    """Why TensorRT's explicit quantization would refuse ``model`` (an ``onnx.ModelProto``); [] when it would not.

    Every ``QuantizeLinear``/``DequantizeLinear`` must carry a constant INT8 zero point that is all
    zeros (an omitted zero point means UINT8), and a ``DequantizeLinear`` of a constant must read
    INT8 values. Returns one line per offending node, naming it.
    """
    import numpy as np

    problems = []
    for n in model.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        where = f"{n.op_type} {n.name or n.output[0]!r}"
        zp_name = n.input[2] if len(n.input) > 2 else ""
        if not zp_name:
            problems.append(f"{where}: no zero point (the default is UINT8); TensorRT needs an INT8 zero point 0")
            continue
        zp = _constant(model, zp_name)
        if zp is None:
            problems.append(f"{where}: zero point {zp_name!r} is not a constant")
            continue
        if zp.dtype != np.int8:
            problems.append(f"{where}: zero point {zp_name!r} is {zp.dtype}, not int8")
        if np.any(zp != 0):
            problems.append(f"{where}: zero point {zp_name!r} is not 0 (values {np.unique(zp)[:4].tolist()}): "
                            f"asymmetric, TensorRT needs symmetric INT8")
        if n.op_type == "DequantizeLinear":
            x = _constant(model, n.input[0])
            if x is not None and x.dtype != np.int8:
                problems.append(f"{where}: dequantizes {n.input[0]!r} of type {x.dtype}, not int8")
    return problems


def gemm_as_matmul(model, nodes: list[str]) -> int:
    """Rewrite, in place, each ``Gemm`` named in ``nodes`` as ``MatMul`` (+ ``Add`` of its bias).

    Only the plain form is rewritten: constant weight, ``alpha = beta = 1``, ``transA = 0``
    (``Gemm`` inputs are 2-D, so ``MatMul`` computes the same); ``transB = 1`` gets a transposed
    copy of the weight (the original stays for any other reader). The node keeps its name, so ``nodes`` still selects it. Returns how many
    were rewritten; another ``Gemm`` raises :class:`QuantizationError` naming it.
    """
    import numpy as np
    from onnx import helper, numpy_helper

    wanted = set(nodes)
    inits = {i.name: i for i in model.graph.initializer}
    done = 0
    for idx, n in enumerate(list(model.graph.node)):
        if n.op_type != "Gemm" or n.name not in wanted:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 \
                or n.input[1] not in inits:
            raise QuantizationError(f"Gemm {n.name!r} ({attrs}) is not a plain x @ W (+ b) with a constant W; "
                                    f"exclude it from the dynamic recipe")
        weight = n.input[1]
        if attrs.get("transB", 0):
            weight = f"{n.input[1]}.transposed"
            w = numpy_helper.to_array(inits[n.input[1]])
            model.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w.T), weight))
        has_bias = len(n.input) > 2 and n.input[2]
        product = f"{n.output[0]}.matmul" if has_bias else n.output[0]
        new = [helper.make_node("MatMul", [n.input[0], weight], [product], name=n.name)]
        if has_bias:
            new.append(helper.make_node("Add", [product, n.input[2]], [n.output[0]], name=f"{n.name}.bias"))
        model.graph.node.remove(n)
        for k, m in enumerate(new):
            model.graph.node.insert(idx + k, m)
        done += 1
    return done
