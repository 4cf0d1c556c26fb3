"""Entropy calibration of one ONNX model with ONNX Runtime, fed by the stage code that really runs it.

:class:`Calibrator` owns an augmented copy of the model (every tensor to calibrate made
an output) and ONNX Runtime's entropy histogram collector; :meth:`Calibrator.collect`
adds one set of inputs. :class:`CalibratingEngine` wraps a stage's engine so that
every call the stage makes also feeds the calibrator: the Whisper decoder is
calibrated on the steps of real greedy decoding, the VAD on real frames and state.

Ranges: ONNX Runtime's entropy (KL) threshold search is symmetric around zero. For
one-sided tensors (GELU, ReLU and Softmax outputs: min >= -5 % of max) it cuts the
range to a small fraction of the values that matter (Whisper's fc2 inputs: 1.3 instead
of 5..46; WER went from 5 % to > 100 %), so for those the observed [min, max] is kept.
Both choices are recorded per tensor.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from edge_rt.build.calibration.entropy import use_fast_entropy
from edge_rt.errors import EdgeRtError

__all__ = ["CalibrationError", "CalibrationOptions", "Calibration", "Calibrator", "CalibratingEngine", "CollectorFull"]


class CalibrationError(EdgeRtError, ValueError):
    """Calibration could not produce ranges (no data, a broken model, a corrupt cache)."""


@dataclass(frozen=True)
class CalibrationOptions:
    """How ranges are computed."""

    num_bins: int = 512  # histogram bins (grow as ranges widen); the KL search is O(bins^2) in Python
    num_quantized_bins: int = 128  # ONNX Runtime's default for int8
    one_sided_ratio: float = 0.05  # min >= -ratio * max: keep [min, max] instead of the entropy threshold
    max_samples: int = 1024  # stop collecting after this many calls


@dataclass(frozen=True)
class Calibration:
    """Per-tensor ranges of one model, as written next to it (``calibration.json``)."""

    ranges: Mapping[str, tuple[float, float]]  # tensor -> (lowest, highest)
    rules: Mapping[str, str]  # tensor -> "entropy" | "max (one-sided)"
    samples: int  # model calls seen
    method: str = "entropy"
    options: Mapping = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"method": self.method, "samples": self.samples, "options": dict(self.options),
                           "ranges": {k: list(v) for k, v in sorted(self.ranges.items())},
                           "rules": dict(sorted(self.rules.items()))}, indent=1)

    @classmethod
    def from_json(cls, text: str, where: str = "calibration") -> "Calibration":
        try:
            d = json.loads(text)
            ranges = {k: (float(v[0]), float(v[1])) for k, v in d["ranges"].items()}
            return cls(ranges, dict(d["rules"]), int(d["samples"]), d.get("method", "entropy"), d.get("options", {}))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise CalibrationError(f"{where} is not a calibration table ({e}); delete it and build again") from e

    def symmetric(self) -> "Calibration":
        """The same calibration with every range made symmetric, ``(-a, a)`` with ``a = max(|lo|, |hi|)``.

        TensorRT's INT8 has no zero point: a range [lo, hi] can only be represented as [-a, a]
        (a one-sided tensor loses one bit). No second calibration: the same thresholds, widened.
        """
        ranges = {k: (-max(abs(lo), abs(hi)), max(abs(lo), abs(hi))) for k, (lo, hi) in self.ranges.items()}
        rules = {k: f"symmetric of {v}" for k, v in self.rules.items()}
        return Calibration(ranges, rules, self.samples, self.method, {**self.options, "symmetric": True})

    def tensors_data(self):
        """ONNX Runtime's ``TensorsData`` for ``quantize_static`` / ``write_calibration_table``."""
        from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

        # Sorted: ONNX Runtime writes calibration.json in this dict's order, and the ranges arrive in the
        # order the calibrator's set of tensors gave them (two builds wrote the same table reordered).
        data = {k: TensorData(lowest=np.array(lo, np.float32), highest=np.array(hi, np.float32))
                for k, (lo, hi) in sorted(self.ranges.items())}
        return TensorsData(CalibrationMethod.Entropy, data)


def _entropy_calibrater_class():
    from onnxruntime.quantization.calibrate import EntropyCalibrater

    class _Only(EntropyCalibrater):
        """ONNX Runtime's entropy calibrater restricted to the tensors we will quantize.

        Without the restriction it would also record the decoder's 448-position caches
        (17 MB a step for Whisper base), which are inputs of MatMuls we keep in float.
        """

        only: frozenset[str] | None = None

        def select_tensors_to_calibrate(self, model):
            tensors, value_infos = super().select_tensors_to_calibrate(model)
            if self.only is not None:
                tensors = {t for t in tensors if t in self.only}
            return tensors, value_infos

    return _Only


class _OneShot:
    """A CalibrationDataReader over one feed dict."""

    def __init__(self, feeds: Mapping[str, np.ndarray]):
        self._feeds: dict | None = dict(feeds)

    def get_next(self):
        feeds, self._feeds = self._feeds, None
        return feeds


class Calibrator:
    """Collects entropy histograms of one model; use as a context manager.

    Args:
        model_path: the FP32 ``.onnx`` (after any graph preparation such as outlier splitting).
        tensors: names to calibrate (inputs of the nodes that will be quantized); None = every
            float input of a MatMul/Conv/Gemm.
        options: see :class:`CalibrationOptions`.
    """

    OP_TYPES = ("MatMul", "Conv", "Gemm", "ConvTranspose")

    def __init__(self, model_path: str | Path, tensors: set[str] | None = None,
                 options: CalibrationOptions = CalibrationOptions()):
        self.model_path = Path(model_path)
        self.tensors = None if tensors is None else frozenset(tensors)
        self.options = options
        self.samples = 0
        self._cal = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> "Calibrator":
        self.activate()
        return self

    def __exit__(self, *exc) -> None:
        self.deactivate()

    def activate(self) -> None:
        import onnx

        try:
            onnx.checker.check_model(str(self.model_path))
        except (onnx.checker.ValidationError, OSError, ValueError) as e:
            raise CalibrationError(
                f"cannot calibrate {self.model_path}: it is not a valid ONNX model ({e}); it is truncated or "
                f"corrupt: rebuild the pack with --force"
            ) from e
        self._tmp = tempfile.TemporaryDirectory(prefix="edge_rt_calib_")
        cls = _entropy_calibrater_class()
        cal = cls(str(self.model_path), list(self.OP_TYPES), str(Path(self._tmp.name) / "augmented.onnx"),
                  num_bins=self.options.num_bins, num_quantized_bins=self.options.num_quantized_bins)
        cal.only = self.tensors
        cal.augment_graph()
        cal.execution_providers = ["CPUExecutionProvider"]
        cal.create_inference_session()
        self._cal = cal

    def deactivate(self) -> None:
        self._cal = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def full(self) -> bool:
        return self.samples >= self.options.max_samples

    def collect(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Run the augmented model on one set of inputs and add its tensors to the histograms."""
        if self._cal is None:
            raise RuntimeError("Calibrator.collect called outside `with Calibrator(...)`")
        if self.full:
            return
        with contextlib.redirect_stdout(io.StringIO()):  # ONNX Runtime prints progress
            self._cal.collect_data(_OneShot(feeds))
        self.samples += 1

    def finish(self) -> Calibration:
        """Entropy thresholds (or [min, max] for one-sided tensors) of every collected tensor."""
        if self._cal is None or self.samples == 0 or self._cal.collector is None:
            raise CalibrationError(
                f"calibration of {self.model_path.name} saw no data: (1) the calibration set is empty "
                f"(check calibration/ and the recipe counts), or (2) the stage never called this model on it "
                f"(e.g. every clip was judged silent)"
            )
        use_fast_entropy(self._cal.collector)  # the same thresholds, found without Python's per-bin sums
        with contextlib.redirect_stdout(io.StringIO()):
            data = self._cal.compute_data()
        hist = self._cal.collector.histogram_dict
        ranges, rules = {}, {}
        for name, td in data.data.items():
            lo_e, hi_e = (float(np.asarray(v).reshape(-1)[0]) for v in td.range_value)
            lo, hi = float(hist[name][2]), float(hist[name][3])
            if hi > 0 and lo >= -self.options.one_sided_ratio * hi:
                ranges[name], rules[name] = (min(lo, 0.0), hi), "max (one-sided)"
            else:
                ranges[name], rules[name] = (lo_e, hi_e), "entropy"
        return Calibration(ranges, rules, self.samples, "entropy", asdict(self.options))


class CollectorFull(Exception):
    """Raised by :class:`CalibratingEngine` to stop a calibration drive once enough samples are in."""


class CalibratingEngine:
    """An :class:`~edge_rt.backends.base.Engine` that feeds a collector on every call.

    The collector is a :class:`Calibrator` or anything with ``collect(feeds)`` and ``full``.
    It also keeps the first input of each distinct shape (up to ``probes``): the speed
    measurement and the tensor comparison reuse those real inputs. Once the collector is
    full the next call raises :class:`CollectorFull`, which ends the drive.
    """

    def __init__(self, engine, calibrator, probes: int = 5):
        self._engine = engine
        self.calibrator = calibrator
        self.probes: list[dict[str, np.ndarray]] = []
        self._shapes: set = set()
        self._max_probes = probes

    @property
    def input_names(self):
        return self._engine.input_names

    @property
    def output_names(self):
        return self._engine.output_names

    def _record(self, inputs: Mapping[str, np.ndarray]) -> None:
        if self.calibrator.full:
            raise CollectorFull
        self.calibrator.collect(inputs)
        sig = tuple(sorted((k, np.shape(v)) for k, v in inputs.items()))
        if sig not in self._shapes and len(self.probes) < self._max_probes:
            self._shapes.add(sig)
            self.probes.append({k: np.array(v, copy=True) for k, v in inputs.items()})

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._record(inputs)
        return self._engine.run(inputs)

    def bind(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray],
             **carry) -> "_CalibratingBound":
        """The wrapped engine's bound step; each run first records the buffers' current contents.

        ``carry`` (``device_resident``, ``host_outputs``) goes to the wrapped engine unchanged.
        """
        return _CalibratingBound(self, self._engine.bind(inputs, outputs, **carry), inputs)


class _CalibratingBound:
    def __init__(self, owner: CalibratingEngine, inner, inputs: Mapping[str, np.ndarray]):
        self._owner, self._inner, self._inputs = owner, inner, inputs

    def run(self) -> None:
        self._owner._record(self._inputs)
        self._inner.run()

    def reset_state(self) -> None:
        self._inner.reset_state()

    def output(self, name: str) -> np.ndarray:
        """The wrapped step's data-dependent output (Piper's waveform)."""
        return self._inner.output(name)
