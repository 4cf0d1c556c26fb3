"""export_piper: the pack's Piper voice and espeak-ng, copied and described."""

from __future__ import annotations

import json
import os

import pytest

from edge_rt.build.export.piper import _probe, export, formant_voices
from edge_rt.backends.factory import OrtEngines
from edge_rt.build.files import sha256_file
from edge_rt.build.packs import PackSpec, acquire
from edge_rt.errors import PackSpecError
from edge_rt.pack import BuiltPack
from edge_rt.stages.tts.espeak import Espeak
from edge_rt.stages.tts.voice import Tts


@pytest.fixture(scope="module")
def raw():
    spec = PackSpec.load("default")
    return acquire(spec).stage_files("tts"), dict(spec.stages["tts"])


@pytest.fixture(scope="module")
def built(raw, tmp_path_factory):
    files, spec = raw
    out = tmp_path_factory.mktemp("pack") / "default"
    entry = export(files, spec, out)
    (out / "manifest.json").write_text(json.dumps({"pack": "default", "stages": {"tts": entry}}))
    return out, entry


def test_entry(raw, built):
    files, _ = raw
    out, entry = built
    assert entry["kind"] == "piper"
    assert entry["models"] == {"en": {"fp32": "fp32/piper_en.onnx"}}
    voice = entry["voices"]["en"]
    assert voice["name"] == "en_US-joe-medium" and voice["espeak_voice"] == "en-us"
    assert voice["opset"] == 15
    assert voice["inputs"]["input"] == ["batch_size", "phonemes"]  # dynamic: the runtime pads to buckets
    assert voice["inputs"]["scales"] == [3]
    assert voice["sha256"] == sha256_file(files["en_model"])  # the voice as shipped
    assert (out / "fp32/piper_en.onnx.data").is_file()  # its weights beside the graph (build/files.py)
    assert entry["sample_rates"] == {"en": 22050, "espeak": 22050}
    assert entry["phoneme_buckets"] == [32, 64, 128, 256, 512]
    for rel in [*entry["assets"].values(), "fp32/piper_en.onnx"]:
        assert (out / rel).exists(), rel
    assert (out / entry["assets"]["espeak_data"] / "pt_dict").is_file()


def test_formant_languages(built):
    _, entry = built
    voices = entry["formant_voices"]
    # The pack picks Brazilian Portuguese (formant_voices.pt = "pt-BR"), matching the MT model's dialect.
    assert voices["pt"] == "pt-BR" and voices["pt-pt"] == "pt" and voices["de"] == "de" and voices["zh"] == "cmn"
    assert "en" not in voices  # Piper speaks English
    assert entry["formant_languages"] == sorted(voices)


def test_languages_without_a_dictionary_are_listed_not_printed(built, capfd):
    out, entry = built
    espeak = Espeak(out / entry["assets"]["espeak_lib"], out / entry["assets"]["espeak_data"])
    voices, unavailable = formant_voices(espeak, exclude=set(entry["voices"]))
    assert "Can't read dictionary file" not in capfd.readouterr().err
    # The espeakng-loader wheel has voices for these without their *_dict files.
    assert {"fo", "kaa", "xex"} <= set(unavailable) and unavailable == entry["formant_unavailable"]
    assert voices == entry["formant_voices"] | {"pt": voices["pt"]} and not set(unavailable) & set(voices)


class _Talkative:
    """Stands in for Espeak: writes to the C stderr like libespeak-ng does."""

    def __init__(self, works: bool):
        self.works = works

    def phonemize(self, text, voice):
        os.write(2, b"Can't read dictionary file: '/x/fo_dict'\nsome other espeak-ng error\n")
        return ["wʌn"] if self.works else []


def test_probe_drops_only_the_missing_dictionary_warning(capfd):
    assert _probe(_Talkative(works=False), "fo") is False
    err = capfd.readouterr().err
    assert "some other espeak-ng error" in err and "Can't read dictionary file" not in err
    assert _probe(_Talkative(works=True), "fo") is True  # a voice that works: its output is not expected
    assert "Can't read dictionary file: '/x/fo_dict'" in capfd.readouterr().err


def test_a_formant_voice_that_does_not_work_is_named(raw, tmp_path):
    files, spec = raw
    with pytest.raises(PackSpecError, match="formant_voices.pt"):
        export(files, {**spec, "formant_voices": {"pt": "no-such-voice"}}, tmp_path / "p")


def test_built_pack_loads(built):
    out, _ = built
    tts = Tts.from_pack(BuiltPack.load(out), engines=OrtEngines(BuiltPack.load(out)))
    assert tts.synthesize("It works.", "en").duration_s > 0.3


def test_missing_espeak_is_named(raw, tmp_path):
    files, spec = raw
    without = {k: v for k, v in files.items() if k != "espeak_data"}
    with pytest.raises(PackSpecError, match="espeak_data"):
        export(without, spec, tmp_path / "x")


def test_default_pack_has_the_entry(default_pack):
    entry = default_pack.stage("tts")
    assert entry["kind"] == "piper" and "en" in entry["voices"]
    assert default_pack.model("tts", "en").name == "piper_en.onnx"


def test_the_voice_is_split_into_prior_and_vocoder_that_give_the_whole_graph(built):
    """The parts (piper_split.py) chained give the shipped graph's waveform exactly; the INT8 and TensorRT
    steps read ``models`` only, so the parts stay FP32 on ONNX Runtime."""
    import numpy as np

    from edge_rt.backends.ort import OrtEngine, SessionOptions
    from edge_rt.build.manifest import stage_files

    out, entry = built
    assert entry["parts"] == {"en/prior": {"fp32": "fp32/piper_en_prior.onnx"},
                              "en/vocoder": {"fp32": "fp32/piper_en_vocoder.onnx"}}
    voice = entry["voices"]["en"]
    assert voice["stream_channels"] == 192 and voice["stream_hop"] == 256
    assert 0.3 < voice["stream_peak"] < 1.0  # measured 0.61 (the 90th percentile of 8 probe sentences)
    assert {"fp32/piper_en_prior.onnx", "fp32/piper_en_vocoder.onnx.data"} <= set(stage_files(entry, out))
    opts = SessionOptions(intra_op_threads=2)
    whole, prior, vocoder = (OrtEngine(out / rel, opts) for rel in
                             ("fp32/piper_en.onnx", "fp32/piper_en_prior.onnx", "fp32/piper_en_vocoder.onnx"))
    ids = np.array([[1, 0, *[(7 * i) % 60 + 3 for i in range(57)]]], np.int64)
    feeds = {"input": ids, "input_lengths": np.array([ids.shape[1]], np.int64),
             "scales": np.array([0.0, 1.0, 0.0], np.float32)}
    z = prior.run(feeds)["z"]
    assert z.shape[:2] == (1, 192)
    np.testing.assert_array_equal(vocoder.run({"z": z})["output"], whole.run(feeds)["output"])


def test_a_graph_without_piper_decoder_is_not_split():
    import onnx
    from onnx import helper

    from edge_rt.build.export.piper_split import split_voice

    x = helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["input"], ["output"], name="/other/Relu")], "g", [x], [y])
    assert split_voice(helper.make_model(graph)) is None
