"""The backend switch: which backend runs a pack here, and why (edge_rt/backends/factory.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from edge_rt.backends.compat import TrtEnvironment
from edge_rt.backends.factory import (BackendUnavailableError, OrtEngines, TrtEngines, choose_backend,
                                      engine_factory)
from edge_rt.pack import BuiltPack

ORIN = TrtEnvironment("10.3.0.30", "Orin (nvgpu)", "8.7", 7620)


def _pack(tmp_path, tensorrt: dict) -> BuiltPack:
    return BuiltPack(name="p", dir=tmp_path, manifest={"pack": "p", "stages": {}, "tensorrt": tensorrt})


def test_cpu_is_always_available(tmp_path):
    choice = choose_backend(_pack(tmp_path, {"status": "skipped", "reason": "no GPU"}), "cpu")
    assert choice.name == "cpu" and "asked for" in choice.reason
    assert isinstance(engine_factory(_pack(tmp_path, {}), choice), OrtEngines)


def test_auto_without_engines_runs_on_the_cpu_and_says_why(tmp_path):
    pack = _pack(tmp_path, {"status": "skipped", "reason": "tensorrt is not installed"})
    choice = choose_backend(pack, "auto", environment=lambda: ORIN)
    assert choice.name == "cpu"
    assert "no TensorRT engines" in choice.reason and "tensorrt is not installed" in choice.reason
    assert "build_engines.py --pack p" in choice.reason


def test_auto_without_a_gpu_runs_on_the_cpu(tmp_path):
    pack = _pack(tmp_path, {"status": "built", **ORIN.as_dict(), "engines": {}})
    choice = choose_backend(pack, "auto", environment=lambda: None)
    assert choice.name == "cpu" and "no CUDA GPU" in choice.reason


def test_auto_picks_tensorrt_for_engines_built_here(tmp_path):
    pack = _pack(tmp_path, {"status": "built", **ORIN.as_dict(), "engines": {}})
    choice = choose_backend(pack, "auto", environment=lambda: ORIN)
    assert choice.name == "tensorrt" and choice.environment == ORIN
    assert isinstance(engine_factory(pack, choice), TrtEngines)


@pytest.mark.parametrize("here, words", [
    (TrtEnvironment("10.3.0.26", "Orin (nvgpu)", "8.7", 7620), "TensorRT 10.3.0.30"),  # exact version, not 10.3
    (TrtEnvironment("10.3.0.30", "NVIDIA H200", "9.0", 143000), "compute capability 8.7"),
])
def test_engines_built_elsewhere_are_refused_with_the_rebuild_command(tmp_path, here, words):
    pack = _pack(tmp_path, {"status": "built", **ORIN.as_dict(), "engines": {}})
    assert choose_backend(pack, "auto", environment=lambda: here).name == "cpu"
    with pytest.raises(BackendUnavailableError) as e:
        choose_backend(pack, "tensorrt", environment=lambda: here)
    assert words in str(e.value) and "build_engines.py --pack p --force" in str(e.value)
    assert "--backend auto" in str(e.value)


def test_tensorrt_without_tensorrt_names_what_to_install(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "tensorrt" else real(n, *a))
    pack = _pack(tmp_path, {"status": "built", **ORIN.as_dict(), "engines": {}})
    with pytest.raises(BackendUnavailableError, match="TensorRT is not installed.*JetPack"):
        choose_backend(pack, "tensorrt")


def test_unknown_backend_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="cpu, tensorrt, auto"):
        choose_backend(_pack(tmp_path, {}), "cuda")


@pytest.mark.slow
def test_a_model_whose_tensorrt_build_fell_back_runs_on_onnx_runtime(default_pack):
    """The manifest records a fall-back: that model loads through ONNX Runtime, and the factory says so."""
    manifest = json.loads(json.dumps(default_pack.manifest))
    manifest["tensorrt"] = {"status": "built", **ORIN.as_dict(),
                            "engines": {"vad/silero": {"backend": "onnxruntime", "file": None, "precision": None,
                                                       "fallbacks": [{"from": "int8", "to": "onnxruntime",
                                                                      "reason": "parser: unsupported op"}]}}}
    pack = BuiltPack(default_pack.name, default_pack.dir, manifest)
    engines = TrtEngines(pack, ORIN)
    engine = engines.load("vad", "silero")
    assert type(engine).__name__ == "OrtEngine"
    assert engines.on_cpu == {"vad/silero": "int8: parser: unsupported op"}


def _translate(clip, backend):
    return subprocess.run([sys.executable, "-m", "edge_rt", "translate", str(clip), "--to", "pt", "--pack", "tiny",
                           "--backend", backend, "--json", "-o", "/dev/null"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_cli_tensorrt_without_tensorrt_is_a_named_error(speech_dir, tiny_pack):
    r = _translate(speech_dir / "en_jfk.wav", "tensorrt")
    assert r.returncode == 2, r.stderr
    assert "--backend tensorrt cannot run here" in r.stderr and "Traceback" not in r.stderr
    assert "install" in r.stderr or "build_engines.py" in r.stderr


@pytest.mark.slow
def test_cli_auto_translates_on_the_cpu_and_says_why(speech_dir, tiny_pack):
    r = _translate(speech_dir / "en_jfk.wav", "auto")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"]["name"] == "cpu" and "TensorRT not used" in out["backend"]["reason"]
    assert "backend: cpu (TensorRT not used" in r.stderr
    assert out["utterances"] and out["utterances"][0]["translation"]


def test_tensorrt_loads_the_device_cache_twin_of_a_model(tmp_path, monkeypatch):
    """asr/decoder runs as asr/decoder_device on TensorRT (its KV cache stays on the GPU)."""
    import edge_rt.backends.trt as trt

    manifest = {"pack": "p", "stages": {"asr": {"models": {"decoder": {"fp32": "a"}, "decoder_device": {"fp32": "b"}}}},
                "tensorrt": {"status": "built", **ORIN.as_dict(),
                             "engines": {"asr/decoder": {"backend": "tensorrt", "file": "x.plan"},
                                         "asr/decoder_device": {"backend": "tensorrt", "file": "y.plan"}}}}
    loaded = []
    class Loaded:
        aliases = None

    monkeypatch.setattr(trt.TrtEngine, "from_pack",
                        classmethod(lambda cls, pack, s, m, here=None: loaded.append(m) or Loaded()))
    TrtEngines(BuiltPack("p", tmp_path, manifest), ORIN).load("asr", "decoder")
    assert loaded == ["decoder_device"]


def test_piper_stays_on_onnx_runtime_under_tensorrt_and_says_why(tmp_path, monkeypatch):
    from edge_rt.backends import factory

    loaded = []
    monkeypatch.setattr(factory.OrtEngines, "load", lambda self, s, m, **kw: loaded.append((s, m)))
    pack = BuiltPack("p", tmp_path, {"pack": "p", "stages": {"tts": {"models": {"en": {"fp32": "a"}}}},
                                     "tensorrt": {"status": "built", **ORIN.as_dict(), "engines": {}}})
    engines = TrtEngines(pack, ORIN)
    engines.load("tts", "en")
    assert loaded == [("tts", "en")] and "output allocator" in engines.on_cpu["tts/en"]


def test_int8_loads_each_model_once_in_int8_and_no_fp32_twin(tiny_pack):
    """Every stage on one CPU factory at INT8: each model's INT8 file where the pack has one (its FP32 file
    only where it has none), no file twice, and each Marian pair's tied embedding held once."""
    from edge_rt.stages.asr.whisper import Asr, AsrOptions
    from edge_rt.stages.mt.marian_io import TIED_EMBEDDING
    from edge_rt.stages.mt.translator import MtOptions, Translator
    from edge_rt.stages.tts.voice import Tts, TtsOptions
    from edge_rt.stages.vad import SileroVad, VadOptions

    engines = OrtEngines(tiny_pack)
    SileroVad.from_pack(tiny_pack, VadOptions(precision="int8"), engines=engines)
    Asr.from_pack(tiny_pack, AsrOptions(precision="int8", threads=1), engines=engines)
    mt = Translator.from_pack(tiny_pack, MtOptions(precision="int8"), engines=engines)
    Tts.from_pack(tiny_pack, TtsOptions(precision="int8", threads=1), engines=engines)

    loaded = engines.loaded
    assert len(set(loaded.values())) == len(loaded)
    for key, path in loaded.items():
        stage, model = key.split("/", 1)
        stage_entry = tiny_pack.stage(stage)
        entry = {**stage_entry.get("parts", {}), **stage_entry["models"]}[model]  # Piper's prior and vocoder: parts
        want = entry.get("int8") or entry["fp32"]
        assert path == tiny_pack.dir / want, f"{key} loaded {path}, not {want}"
    mt_models = {f"mt/{p}/{m}" for p in mt.pairs for m in ("encoder", "decoder")}
    assert {k for k in loaded if k.startswith("mt/")} == mt_models
    assert "asr/decoder_device" not in loaded  # the TensorRT twin of the decoder is not loaded on the CPU
    assert {k for k in loaded if k.startswith("tts/")} == {"tts/en/prior", "tts/en/vocoder"}  # not the whole graph

    for pair in mt.pairs:
        d = mt.direction(*pair.split("-"))
        assert d._enc.shared_initializers == d._dec.shared_initializers == (TIED_EMBEDDING,)
        assert d._enc._initializers[TIED_EMBEDDING][0] is d._dec._initializers[TIED_EMBEDDING][0]
    assert engines.shared.nbytes == len(mt.pairs) * 32000 * 256 * 4


def test_tuning_sets_session_options_per_stage_and_model(tmp_path):
    """A "stage/model" entry wins over its stage's; the rest are SessionOptions' defaults."""
    from edge_rt.backends.ort import SessionOptions

    engines = OrtEngines(_pack(tmp_path, {}), tuning={"tts": {"graph_optimization": "basic", "prepack": False},
                                                     "tts/en": {"prepack": True}, "asr/decoder": {"prepack": False}})
    assert engines.session_options("tts", "en", 2) == SessionOptions(intra_op_threads=2, graph_optimization="basic")
    assert engines.session_options("tts", "de", 1) == SessionOptions(intra_op_threads=1, graph_optimization="basic",
                                                                     prepack=False)
    assert engines.session_options("asr", "encoder", 2) == SessionOptions(intra_op_threads=2)
    assert engines.session_options("asr", "decoder", 2) == SessionOptions(intra_op_threads=2, prepack=False)
    with pytest.raises(TypeError):
        OrtEngines(_pack(tmp_path, {}), tuning={"vad": {"no_such_knob": 1}}).session_options("vad", "silero", 1)


def test_every_session_spins_only_while_its_runs_last(tmp_path):
    """By default every session's threads spin during its runs and stop when they return, so they do not take the
    cores from the next session the loop's worker runs (SessionOptions.spinning "run"; ORT_TUNING sets none)."""
    engines = OrtEngines(_pack(tmp_path, {}))
    for stage, model in (("asr", "decoder"), ("asr", "encoder"), ("turn", "smart_turn"), ("tts", "en"),
                         ("mt", "en-pt/decoder"), ("vad", "silero")):
        assert engines.session_options(stage, model, 2).spinning == "run", (stage, model)
