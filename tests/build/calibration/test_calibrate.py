"""Entropy calibration on a tiny real graph, the calibration tables, the audio recipe and the corpus."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from edge_rt.build.calibration.audio import AudioRecipe, AudioSet, Voice, build_audio_set, load_or_build, speech_labels
from edge_rt.build.calibration.corpus import HOLD_OUT_EVERY, load_corpus
from edge_rt.build.calibration.table import TRT_CACHE, parse_trt_cache, trt_cache_text, trt_version_code, write_tables
from edge_rt.build.calibration.calibrate import (CalibratingEngine, Calibration, CalibrationError, CalibrationOptions, Calibrator,
                                     CollectorFull)
from edge_rt.errors import EdgeRtError
from edge_rt.units import SAMPLE_RATE, VAD_FRAME


def mlp(path, d=16, hidden=32, seed=0):
    """x[1, T, d] -> MatMul -> Relu -> MatMul -> y: a tiny real graph with a one-sided tensor."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((d, hidden)).astype(np.float32) * 0.3, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((hidden, d)).astype(np.float32) * 0.3, "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T", d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", d])], [w1, w2])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def feeds(n, t=8, d=16, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, t + i % 3, d)).astype(np.float32)} for i in range(n)]


def test_entropy_ranges_and_one_sided_rule(tmp_path):
    path = mlp(tmp_path / "mlp.onnx")
    with Calibrator(path, {"x", "r"}, CalibrationOptions(num_bins=128)) as cal:
        for f in feeds(12):
            cal.collect(f)
        c = cal.finish()
    assert c.samples == 12 and set(c.ranges) == {"x", "r"}
    assert c.rules["x"] == "entropy" and c.rules["r"] == "max (one-sided)"
    lo, hi = c.ranges["r"]
    assert lo == 0.0 and hi > 0  # ReLU output keeps its observed maximum, not a clipped KL threshold
    assert c.ranges["x"][0] < 0 < c.ranges["x"][1]
    again = Calibration.from_json(c.to_json())
    assert again.ranges == c.ranges and again.samples == 12


def test_no_data_is_a_named_error(tmp_path):
    path = mlp(tmp_path / "mlp.onnx")
    with Calibrator(path, {"x"}) as cal:
        with pytest.raises(CalibrationError, match="saw no data") as e:
            cal.finish()
    assert isinstance(e.value, EdgeRtError)


def test_truncated_model_is_a_named_error(tmp_path):
    path = mlp(tmp_path / "mlp.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CalibrationError, match="truncated or corrupt"):
        with Calibrator(bad, {"x"}):
            pass


def test_calibrating_engine_records_probes_and_stops_when_full(tmp_path):
    from edge_rt.backends.ort import OrtEngine

    path = mlp(tmp_path / "mlp.onnx")
    engine = OrtEngine(path)
    with Calibrator(path, {"x"}, CalibrationOptions(max_samples=4)) as cal:
        wrapped = CalibratingEngine(engine, cal, probes=2)
        outs = [wrapped.run(f) for f in feeds(4)]
        with pytest.raises(CollectorFull):
            wrapped.run(feeds(1)[0])
    assert cal.samples == 4 and len(wrapped.probes) == 2  # two distinct shapes kept
    np.testing.assert_allclose(outs[0]["y"], engine.run(feeds(1)[0])["y"], rtol=1e-6)


def test_trt_cache_format():
    assert trt_version_code("8.6.1") == 8601 and trt_version_code("10.3.0") == 100300
    text = trt_cache_text({"b": (-2.0, 1.0), "a": (0.0, 1.27)}, "10.3.0")
    lines = text.splitlines()
    assert lines[0] == "TRT-100300-EntropyCalibration2"
    assert lines[1] == f"a: {struct.pack('>f', 0.01).hex()}"  # 1.27 / 127, big-endian float32 hex
    assert lines[2].startswith("b: ") and len(lines[2].split(": ")[1]) == 8
    version, scales = parse_trt_cache(text)
    assert version == 100300 and scales["b"] == pytest.approx(2.0 / 127) and scales["a"] == pytest.approx(0.01)
    with pytest.raises(CalibrationError, match="first line"):
        parse_trt_cache("calibration.json\nx: 1\n")
    with pytest.raises(CalibrationError, match="line 2"):
        parse_trt_cache("TRT-8601-EntropyCalibration2\nx: zz\n")


def test_write_tables(tmp_path):
    c = Calibration({"x": (-1.5, 2.0), "r": (0.0, 3.0)}, {"x": "entropy", "r": "max (one-sided)"}, 5)
    files = write_tables(c, tmp_path / "m.calibration")
    names = {f.name for f in files}
    assert {"calibration.json", "calibration.flatbuffers", "calibration.cache", "ranges.json", TRT_CACHE} <= names
    assert (tmp_path / "m.calibration" / "calibration.cache").read_text().splitlines()[0].startswith("r 3.0")
    assert parse_trt_cache((tmp_path / "m.calibration" / TRT_CACHE).read_text())[1]["x"] == pytest.approx(2.0 / 127)
    assert [p.name for p in tmp_path.iterdir()] == ["m.calibration"]  # no temporary left behind
    # The same ranges found in another order (a set's order in another process) write the same bytes.
    other = Calibration(dict(reversed(list(c.ranges.items()))), dict(c.rules), 5)
    again = write_tables(other, tmp_path / "again")
    assert [f.read_bytes() for f in again] == [f.read_bytes() for f in files]


# -- the audio recipe ---------------------------------------------------------------------------------

def _tone_voice(lang="en"):
    def speak(text):
        t = np.arange(int(0.05 * len(text) * 22050)) / 22050
        return (0.3 * np.sin(2 * np.pi * 180 * t) * (np.sin(2 * np.pi * 3 * t) > 0)).astype(np.float32), 22050
    return Voice(f"tone:{lang}", lang, speak)


def test_audio_set_is_deterministic_and_covers_the_kinds(tmp_path):
    recipe = AudioRecipe(n_samples=40, n_held_out=8)
    sentences = {"en": ["one two three", "four five six seven"]}
    a = build_audio_set(recipe, [_tone_voice()], sentences)
    b = build_audio_set(recipe, [_tone_voice()], sentences)
    assert len(a) == 40 and set(a.counts()) == {"speech", "speech_music", "plosives", "music", "noise", "silence"}
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.audio, y.audio)
    for s in a:
        assert s.audio.dtype == np.float32 and np.all(np.abs(s.audio) <= 1.0)
        assert len(s.speech) == -(-len(s.audio) // VAD_FRAME)
        assert s.speech.any() == (s.kind in ("speech", "speech_music") or (s.kind == "plosives" and bool(s.text)))
    fresh = load_or_build(tmp_path, recipe, [_tone_voice()], sentences, ["h"])
    loaded = AudioSet.load(next(tmp_path.glob("audio-calib-*.npz")))
    again = load_or_build(tmp_path, recipe, [_tone_voice()], sentences, ["h"])  # from the cache
    assert loaded.key == fresh.key == again.key and len(loaded) == 40
    # A build from scratch gates on the very samples a rebuild loads (16-bit PCM), not on the float audio
    # it just made: the two once gave the tiny pack different FP32 WERs and different choices.
    assert any(not np.array_equal(x.audio, y.audio) for x, y in zip(a, loaded))  # the PCM round trip moves them
    for x, y, z in zip(fresh, loaded, again):
        np.testing.assert_array_equal(x.audio, y.audio)
        np.testing.assert_array_equal(x.audio, z.audio)
        np.testing.assert_array_equal(x.speech, z.speech)


def test_audio_recipe_needs_voices_and_sane_shares():
    with pytest.raises(CalibrationError, match="at least one voice"):
        build_audio_set(AudioRecipe(n_samples=4), [], {"en": ["x"]})
    with pytest.raises(CalibrationError, match="more than 1"):
        AudioRecipe(shares=(("music", 0.7), ("noise", 0.5))).counts()


def test_speech_labels():
    x = np.zeros(SAMPLE_RATE, np.float32)
    x[5000:9000] = 0.5
    labels = speech_labels(x)
    assert labels.dtype == bool and labels[10:17].all() and not labels[:9].any() and not labels[19:].any()


def test_corpus_split_and_missing_language(tmp_path):
    en, pt = load_corpus("en"), load_corpus("pt")
    assert len(en.calibration) + len(en.held_out) >= 100 and len(en.held_out) == len(pt.held_out)
    assert not set(en.calibration) & set(en.held_out)
    assert len(en.held_out) == (len(en.calibration) + len(en.held_out)) // HOLD_OUT_EVERY
    with pytest.raises(CalibrationError, match="no calibration corpus for language 'xx'"):
        load_corpus("xx")
    (tmp_path / "sentences_en.txt").write_text("# only a comment\nOne.\n")
    with pytest.raises(CalibrationError, match="holds 1 sentences"):
        load_corpus("en", tmp_path)
