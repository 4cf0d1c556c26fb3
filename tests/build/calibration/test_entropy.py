"""The vectorized entropy threshold search gives ONNX Runtime's thresholds, value for value."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.build.calibration.calibrate import CalibrationOptions, Calibrator
from edge_rt.build.calibration.entropy import entropy_threshold, use_fast_entropy
from edge_rt.stages.asr.mel import log_mel
from tests.build.calibration.test_calibrate import feeds, mlp


def _collector(arrays: dict[str, list[np.ndarray]], num_bins: int):
    """ONNX Runtime's own histogram collector fed with ``arrays`` (histograms grow as ranges widen)."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    c = HistogramCollector("entropy", True, num_bins, 128, 99.999, "same")
    for i in range(max(len(v) for v in arrays.values())):
        c.collect({k: [v[i]] for k, v in arrays.items() if i < len(v)})
    return c


def _assert_same(collector) -> None:
    assert collector.histogram_dict
    for name, histogram in collector.histogram_dict.items():
        assert np.issubdtype(histogram[0].dtype, np.integer)
        theirs = collector.get_entropy_threshold(histogram, 128)
        ours = entropy_threshold(histogram, 128)
        assert [float(x) for x in ours] == [float(x) for x in theirs], name
        assert all(np.asarray(a).dtype == np.asarray(b).dtype for a, b in zip(ours, theirs)), name


@pytest.mark.parametrize("num_bins", [512, 2048])
def test_real_audio_histograms(num_bins, speech_dir):
    wav = read_audio(speech_dir / "en_jfk.wav")
    mel = log_mel(wav[: 16000 * 5])
    windows = [wav[i: i + 16000] for i in range(0, 16000 * 8, 16000)]
    _assert_same(_collector({"wave": windows, "mel": [mel, mel * 1.7, mel[:, :100]]}, num_bins))


def test_synthetic_histograms_with_empty_bins_and_growth():
    rng = np.random.default_rng(3)
    arrays = {"heavy": [rng.standard_t(2, 5000).astype(np.float32) * (1 + i) for i in range(4)],
              "sparse": [np.concatenate([np.zeros(900, np.float32), rng.normal(0, 1, 100).astype(np.float32)])],
              "one_sided": [np.abs(rng.normal(0, 2, 3000)).astype(np.float32)],
              "two_spikes": [np.repeat(np.float32([-3.0, 0.5]), 500)]}
    _assert_same(_collector(arrays, 512))


def test_the_calibrator_uses_it_and_finds_the_same_ranges(tmp_path, monkeypatch):
    import edge_rt.build.calibration.calibrate as calibrate

    path = mlp(tmp_path / "mlp.onnx")
    got = []
    for fast in (True, False):
        with monkeypatch.context() as m, Calibrator(path, {"x", "h"}, CalibrationOptions(num_bins=256)) as cal:
            if not fast:  # what finish() does, undone: ONNX Runtime's own search
                m.setattr(calibrate, "use_fast_entropy", lambda collector: None)
            for f in feeds(10):
                cal.collect(f)
            got.append(cal.finish())
            assert ("get_entropy_threshold" in vars(cal._cal.collector)) == fast  # finish() swapped the search in
    assert got[0].ranges == got[1].ranges and got[0].rules["x"] == "entropy"


def test_a_float_histogram_goes_to_onnx_runtime():
    calls = []

    class Collector:
        def get_entropy_threshold(self, histogram, n):
            calls.append(n)
            return (-1.0, 1.0)

    c = Collector()
    use_fast_entropy(c)
    assert c.get_entropy_threshold((np.ones(300), np.linspace(-1, 1, 301, dtype=np.float32), -1, 1), 128) == (-1.0, 1.0)
    assert calls == [128]
