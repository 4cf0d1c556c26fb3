"""Piper voices and espeak-ng: copy them into the pack and record what the runtime needs.

Piper's ONNX graph runs as shipped (opset 15, standard fp32 ops): no conversion.
Its phoneme-id input has a dynamic length; the runtime pads ids to the lengths in
``phoneme_buckets`` (VITS masks by ``input_lengths``, so padding changes
nothing: see edge_rt/stages/tts/voice.py). The waveform length stays data dependent.

Each single-speaker voice is also split into its prior and its vocoder (piper_split.py), recorded
as the stage's ``parts`` (the INT8 and TensorRT steps read ``models`` only): the runtime runs those
two, so speech can start after one window of the vocoder (stages/tts/vocoder.py). The voice's
``stream_peak`` is the level a streamed sentence is scaled by: a sentence's own peak is known only
once all of it is synthesized.

espeak-ng (library + data) phonemizes for Piper and is the formant voice of
every language without a Piper voice; the build lists those languages by
asking the copied library itself, and keeps only the ones that phonemize.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np
import onnx

from edge_rt.build.export.piper_split import split_voice
from edge_rt.build.files import copy_file, copy_tree, save_onnx, sha256_file
from edge_rt.errors import PackSpecError, UnsupportedLanguageError
from edge_rt.stages.tts.espeak import Espeak
from edge_rt.stages.tts.piper_ids import PiperVoiceConfig, phonemes_to_ids, split_phonemes
from edge_rt.stages.tts.voice import DEFAULT_PHONEME_BUCKETS

ASSETS = "assets/tts"
ESPEAK_DIR = f"{ASSETS}/espeak"
PROBE = "1 2 3"  # every espeak-ng dictionary speaks digits; a missing dictionary gives no phonemes
# What espeak-ng prints (on the C stderr) when a voice's language has no *_dict in the data:
# the espeakng-loader wheel ships voices for fo, kaa and xex without their dictionaries.
_NO_DICTIONARY = re.compile(r"^Can't read dictionary file: .*$")


# Sentences whose peaks set a streamed voice's level (deterministic synthesis, no noise): English for
# English voices, digits (which every espeak-ng dictionary speaks) for the others.
PEAK_PROBES = {
    "en": ("Where is the nearest train station?", "Thank you very much for your help today.",
           "The meeting starts at nine, so please be on time.", "Yes.",
           "I would like a cup of coffee and a glass of water, please.", "How much does this cost?",
           "Turn left at the second traffic light and keep going straight.", "We will be back tomorrow morning."),
}
DIGIT_PROBES = ("1 2 3 4 5 6 7 8 9 10.", "25, 37, 48.", "100 200 300.", "7 8 9.")
PEAK_QUANTILE = 90  # the level puts 9 in 10 probe sentences' peaks at or below full scale


def _model_rel(lang: str, part: str = "") -> str:
    return f"fp32/piper_{lang}{'_' + part if part else ''}.onnx"


def stream_peak(prior_path: Path, vocoder_path: Path, config: PiperVoiceConfig, espeak: Espeak, lang: str) -> float:
    """The ``PEAK_QUANTILE`` percentile of the probe sentences' waveform peaks (prior then vocoder, no noise)."""
    from edge_rt.backends.ort import OrtEngine, SessionOptions

    prior, vocoder = (OrtEngine(p, SessionOptions(intra_op_threads=1)) for p in (prior_path, vocoder_path))
    scales = np.array([0.0, config.length_scale, 0.0], np.float32)
    peaks = []
    for text in PEAK_PROBES.get(lang.split("-")[0], DIGIT_PROBES):
        for phonemes in espeak.phonemize(text, config.espeak_voice):
            ids = phonemes_to_ids(split_phonemes(phonemes, config.vowel_clusters), config.phoneme_id_map)
            z = prior.run({"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
                           "scales": scales})["z"]
            peaks.append(float(np.abs(vocoder.run({"z": z})["output"]).max()))
    return round(float(np.percentile(peaks, PEAK_QUANTILE)), 4)


def _describe_model(path: Path) -> dict:
    """Opset and dynamic dims of a Piper graph; fails loudly on a truncated or foreign file."""
    onnx.checker.check_model(str(path))
    model = onnx.load(str(path), load_external_data=False)
    names = {i.name for i in model.graph.input}
    missing = {"input", "input_lengths", "scales"} - names
    if missing or "output" not in {o.name for o in model.graph.output}:
        raise PackSpecError(f"{path} is not a Piper voice graph: it lacks inputs {sorted(missing)} or output 'output'")

    def dims(values) -> dict[str, list]:
        return {
            v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values
        }

    return {
        "opset": max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "inputs": dims(model.graph.input),  # a string is a dynamic dim
        "outputs": dims(model.graph.output),
    }


def _check_loads(path: Path) -> None:
    from edge_rt.backends.ort import OrtEngine, SessionOptions

    OrtEngine(path, SessionOptions(intra_op_threads=1))  # raises PackNotBuiltError naming the file


@contextmanager
def _c_stderr() -> Iterator[list[str]]:
    """Capture what native code writes to file descriptor 2; the text is in the yielded list afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    captured: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.append(tmp.read().decode("utf-8", errors="replace"))


def _probe(espeak: Espeak, voice: str) -> bool:
    """Whether ``voice`` phonemizes; espeak-ng's warning about a missing dictionary is expected for one
    that does not, so only that line is dropped; any other output is passed on to stderr."""
    with _c_stderr() as err:
        works = bool(espeak.phonemize(PROBE, voice))
    lines = err[0].splitlines()
    if not works:
        lines = [line for line in lines if not _NO_DICTIONARY.match(line)]
    if lines:
        print("\n".join(lines), file=sys.stderr)
    return works


def formant_voices(espeak: Espeak, exclude: set[str]) -> tuple[dict[str, str], list[str]]:
    """Voices that phonemize and language codes that cannot, from every voice in the packed data.

    Returns ``({language code: espeak-ng voice that speaks it best (lowest priority)}, [codes
    whose voice gives no phonemes, e.g. its dictionary is not in the data])``.
    """
    best: dict[str, tuple[int, str]] = {}
    for v in espeak.voices():
        for code, priority in v.languages:
            code = code.lower()
            if code not in best or priority < best[code][0]:
                best[code] = (priority, v.file_name)
    out, unavailable = {}, []
    for code, (_, voice) in sorted(best.items()):
        if code in exclude:
            continue
        if _probe(espeak, voice):
            out[code] = voice
        else:
            unavailable.append(code)
    return out, unavailable


def export(files: Mapping[str, Path], spec: dict, out_dir: Path) -> dict:
    """Copy the Piper voices and espeak-ng into ``out_dir``; returns the manifest's ``tts`` entry.

    Args:
        files: ``<lang>_model`` and ``<lang>_config`` per voice, ``espeak_lib``, ``espeak_data`` (a directory).
        spec: the pack's ``[stages.tts]`` table; ``spec["voices"]`` maps language -> Piper voice name.
        out_dir: ``engines/<pack>``; every path in the entry is relative to it.
    """
    out_dir = Path(out_dir)
    voices_spec = dict(spec.get("voices", {}))
    for key in ("espeak_lib", "espeak_data"):
        if key not in files:
            raise PackSpecError(f"[stages.tts] needs files.{key}; it has {', '.join(files)}")

    lib_rel = f"{ESPEAK_DIR}/{Path(files['espeak_lib']).name}"
    data_rel = f"{ESPEAK_DIR}/espeak-ng-data"
    copy_file(files["espeak_lib"], out_dir / lib_rel)
    copy_tree(files["espeak_data"], out_dir / data_rel)
    assets = {"espeak_lib": lib_rel, "espeak_data": data_rel}
    espeak = Espeak(out_dir / lib_rel, out_dir / data_rel)

    voices, models, parts, sample_rates = {}, {}, {}, {}
    for lang, name in voices_spec.items():
        for key in (f"{lang}_model", f"{lang}_config"):
            if key not in files:
                raise PackSpecError(f"[stages.tts] voice {lang} ({name}) needs files.{key}")
        config_src = Path(files[f"{lang}_config"])
        try:
            config = PiperVoiceConfig.from_dict(json.loads(config_src.read_text(encoding="utf-8")))
        except (OSError, ValueError) as e:
            raise PackSpecError(f"[stages.tts] files.{lang}_config ({config_src}) is unusable: {e}") from e
        if not espeak.phonemize(PROBE, config.espeak_voice):
            raise PackSpecError(
                f"Piper voice {name} phonemizes with espeak-ng voice {config.espeak_voice!r}, which the "
                f"packed espeak-ng data cannot speak"
            )
        model_rel = _model_rel(lang)
        config_rel = f"{ASSETS}/{config_src.name}"
        # the shipped graph, its weights moved to a weights file (build/files.py: ONNX Runtime maps them)
        graph = onnx.load(str(files[f"{lang}_model"]))
        save_onnx(graph, out_dir / model_rel)
        copy_file(config_src, out_dir / config_rel)
        _check_loads(out_dir / model_rel)
        voice_parts = split_voice(graph)
        stream = {}
        if voice_parts is not None:
            for part in ("prior", "vocoder"):
                rel = _model_rel(lang, part)
                save_onnx(getattr(voice_parts, part), out_dir / rel)
                parts[f"{lang}/{part}"] = {"fp32": rel}
            # stream_peak loads and runs both parts: a part that does not load fails the build there
            stream = {"stream_channels": voice_parts.channels, "stream_hop": voice_parts.hop,
                      "stream_peak": stream_peak(*(out_dir / parts[f"{lang}/{p}"]["fp32"] for p in ("prior", "vocoder")),
                                                 config, espeak, lang)}
        voices[lang] = {
            "name": name,
            "espeak_voice": config.espeak_voice,
            "sample_rate": config.sample_rate,
            "sha256": sha256_file(files[f"{lang}_model"]),  # the voice as its wheel ships it
            **_describe_model(out_dir / model_rel),
            **stream,
        }
        models[lang] = {"fp32": model_rel}
        assets[f"{lang}_config"] = config_rel
        sample_rates[lang] = config.sample_rate

    formant, unavailable = formant_voices(espeak, exclude=set(voices))
    # The pack may pick the dialect, e.g. pt -> pt-BR to match the Brazilian Portuguese the MT model writes.
    for code, voice in dict(spec.get("formant_voices", {})).items():
        try:
            works = bool(espeak.phonemize(PROBE, voice))
        except UnsupportedLanguageError as e:
            raise PackSpecError(f"[stages.tts] formant_voices.{code} = {voice!r}: {e}") from e
        if not works:
            raise PackSpecError(f"[stages.tts] formant_voices.{code} = {voice!r} is not an espeak-ng voice that works")
        formant[code] = voice
    sample_rates["espeak"] = espeak.sample_rate
    return {
        "kind": "piper",
        "voices": voices,
        "models": models,
        "parts": parts,  # each voice's prior and vocoder (piper_split.py): FP32, CPU, never quantized
        "assets": assets,
        "phoneme_buckets": list(DEFAULT_PHONEME_BUCKETS),
        "formant_voices": formant,
        "formant_languages": sorted(formant),
        "formant_unavailable": unavailable,  # voices in the data that give no phonemes (no dictionary)
        "sample_rates": sample_rates,
    }
