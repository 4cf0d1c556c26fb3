"""Silero VAD stage on real speech, against the upstream graph."""

from __future__ import annotations

import zipfile

import numpy as np
import onnxruntime as ort
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.backends.factory import OrtEngines
from edge_rt.build.packs import PackSpec, cache_dir, obtain_wheel
from edge_rt.loop.endpoint import Endpointer
from edge_rt.stages.vad import SileroVad
from edge_rt.units import VAD_CONTEXT, VAD_FRAME


@pytest.fixture(scope="module")
def vad(default_pack):
    return SileroVad.from_pack(default_pack, engines=OrtEngines(default_pack))


def _upstream_probs(audio: np.ndarray) -> np.ndarray:
    """Upstream's default graph (silero_vad.onnx), driven the way silero_vad.OnnxWrapper drives it:
    64 samples of context from the previous chunk, recurrent state carried."""
    spec = PackSpec.load("default")
    wheel = obtain_wheel(spec.wheels["silero-vad"], cache_dir() / "wheels")  # verified by sha256
    with zipfile.ZipFile(wheel) as zf:
        upstream = zf.read("silero_vad/data/silero_vad.onnx")
    sess = ort.InferenceSession(upstream, providers=["CPUExecutionProvider"])
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros(VAD_CONTEXT, np.float32)
    out = []
    for i in range(len(audio) // VAD_FRAME):
        chunk = audio[i * VAD_FRAME : (i + 1) * VAD_FRAME]
        p, state = sess.run(None, {"input": np.concatenate([context, chunk])[None], "state": state,
                                   "sr": np.array(16000, np.int64)})
        context = chunk[-VAD_CONTEXT:]
        out.append(p[0, 0])
    return np.array(out, np.float32)


@pytest.mark.parametrize("clip", ["en_jfk", "zh_aishell1_BAC009S0764W0121", "fr_fleurs_ski"])
def test_probabilities_match_upstream_silero(vad, speech_dir, clip):
    audio = read_audio(speech_dir / f"{clip}.wav")
    n = len(audio) // VAD_FRAME * VAD_FRAME
    ours = vad.probabilities(audio[:n])
    ref = _upstream_probs(audio[:n])
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, atol=1e-4)
    assert (ref > 0.5).mean() > 0.3, "the clip is speech: the reference must say so"


def test_streaming_equals_whole_clip(vad, speech_dir):
    audio = read_audio(speech_dir / "en_librispeech_1089-134691-0000.wav")
    whole = vad.probabilities(audio)
    vad.reset()
    n = len(audio) // VAD_FRAME
    streamed = [vad(audio[i * VAD_FRAME : (i + 1) * VAD_FRAME]) for i in range(n)]
    np.testing.assert_allclose(whole[:n], streamed, atol=1e-6)


def test_silence_has_no_speech(vad):
    probs = vad.probabilities(np.zeros(16000 * 3, np.float32))
    assert probs.max() < 0.1
    assert _utterances(probs) == []


def test_two_utterances_are_two_segments(vad, speech_dir):
    # Two FLEURS sentences joined with 350 ms of silence (see the data README).
    audio = read_audio(speech_dir / "zh_fleurs_1805_1830_concat.wav")
    segs = _utterances(vad.probabilities(audio))
    assert len(segs) == 2
    assert segs[0][1] <= segs[1][0]


def _utterances(probs) -> list[tuple[int, int]]:
    ep, out, start = Endpointer(), [], None
    for i, p in enumerate(probs):
        for e in ep.push(i, float(p)):
            if e.kind == "start":
                start = e.sample
            else:
                out.append((start, e.sample))
    out += [(start, e.sample) for e in ep.flush(len(probs))]
    return out


def test_wrong_frame_size_is_named(vad):
    with pytest.raises(ValueError, match="512 samples"):
        vad(np.zeros(480, np.float32))


class _BindOnly:
    """Like the TensorRT runner: no allocating run(); records what bind() was asked to carry."""

    def __init__(self, engine):
        self._engine, self.carry = engine, []

    def run(self, inputs):
        raise AssertionError("the VAD called the allocating Engine.run()")

    def bind(self, inputs, outputs, **carry):
        self.carry.append(carry)
        return self._engine.bind(inputs, outputs, **carry)


def test_state_is_carried_by_the_backend_and_reset(default_pack, speech_dir):
    from edge_rt.backends.ort import OrtEngine, SessionOptions

    engine = _BindOnly(OrtEngine(default_pack.model("vad", "silero"), SessionOptions(intra_op_threads=1)))
    vad = SileroVad(engine)
    assert engine.carry == [{"device_resident": {"state": "stateN"}, "host_outputs": ("output",)}]
    audio = read_audio(speech_dir / "en_jfk.wav")[: 100 * VAD_FRAME]
    first = vad.probabilities(audio)
    assert (first > 0.5).any() and np.ptp(first) > 0.5  # the state matters: speech is found
    vad(audio[:VAD_FRAME])  # leaves state behind; probabilities() resets it first
    np.testing.assert_array_equal(vad.probabilities(audio), first)
