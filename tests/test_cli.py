"""`edge-rt translate` end to end with the default pack, and its named errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from edge_rt.audio.files import resample
from edge_rt.backends.factory import OrtEngines
from edge_rt.stages.asr.whisper import Asr


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edge_rt", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr


def test_missing_audio_file(tmp_path):
    proc = run_cli("translate", str(tmp_path / "nope.wav"), "--to", "pt")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    _no_traceback(proc)


def test_corrupt_audio_file(tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF....WAVEjunkjunkjunk")
    proc = run_cli("translate", str(bad), "--to", "pt")
    assert proc.returncode == 2 and "cannot decode" in proc.stderr
    _no_traceback(proc)


def test_pack_not_built_says_how_to_build(tmp_path, speech_dir):
    proc = run_cli("translate", str(speech_dir / "en_jfk.wav"), "--to", "pt",
                   env={"EDGE_RT_ENGINES": str(tmp_path)})
    assert proc.returncode == 2
    assert "python tools/build_engines.py --pack default" in proc.stderr
    _no_traceback(proc)


def test_unknown_target_language(default_pack, speech_dir, tmp_path):
    proc = run_cli("translate", str(speech_dir / "en_jfk.wav"), "--to", "xx", "-o", str(tmp_path / "o.wav"))
    assert proc.returncode == 2 and "translates into en, pt" in proc.stderr
    assert not (tmp_path / "o.wav").exists()
    _no_traceback(proc)


def test_unknown_source_language(default_pack, speech_dir, tmp_path):
    proc = run_cli("translate", str(speech_dir / "en_jfk.wav"), "--to", "pt", "--from", "qq",
                   "-o", str(tmp_path / "o.wav"))
    assert proc.returncode == 2 and "'qq'" in proc.stderr
    _no_traceback(proc)


def test_several_source_languages_are_detected_among(default_pack, speech_dir, tmp_path):
    from edge_rt.cli.speech import _sources

    assert _sources(None) == (None, None) and _sources("en") == ("en", None)
    assert _sources("en, de,en") == (None, ("en", "de"))
    proc = run_cli("translate", str(speech_dir / "en_jfk.wav"), "--to", "pt", "--from", "en,qq",
                   "-o", str(tmp_path / "o.wav"))
    assert proc.returncode == 2 and "'qq'" in proc.stderr
    _no_traceback(proc)
    proc = run_cli("translate", str(speech_dir / "en_jfk.wav"), "--to", "pt", "--from", "de,fr", "--json",
                   "-o", str(tmp_path / "o.wav"))
    assert proc.returncode == 0, proc.stderr
    assert {u["lang"] for u in json.loads(proc.stdout)["utterances"]} <= {"de", "fr"}  # only what was allowed


@pytest.fixture(scope="module")
def back_asr(default_pack):
    return Asr.from_pack(default_pack, engines=OrtEngines(default_pack))


def _speech_in(path: Path) -> np.ndarray:
    data, rate = sf.read(path, dtype="float32")
    assert rate in (16000, 22050)
    assert np.sqrt(np.mean(data**2)) > 0.01, "the output is silent"
    return resample(data, rate)


def test_english_to_portuguese(default_pack, speech_dir, tmp_path):
    out = tmp_path / "jfk.pt.wav"
    proc = run_cli("translate", str(speech_dir / "en_jfk.wav"), "--to", "pt", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["output"] == str(out)
    utts = result["utterances"]
    assert utts and all(u["lang"] == "en" for u in utts)
    assert {"start_s", "end_s", "lang", "text", "translation"} <= set(utts[0])
    text = " ".join(u["text"] for u in utts).lower()
    translation = " ".join(u["translation"] for u in utts).lower()
    assert "country" in text
    assert "país" in translation  # "your country" → "seu país"
    _speech_in(out)


def test_french_to_english_speech(default_pack, speech_dir, tmp_path, back_asr):
    out = tmp_path / "fr.en.wav"
    proc = run_cli("translate", str(speech_dir / "fr_fleurs_test_005.wav"), "--to", "en", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    utts = json.loads(proc.stdout)["utterances"]
    assert utts and utts[0]["lang"] == "fr"
    spoken = " ".join(u["translation"] for u in utts)
    # The WAV holds English speech: transcribe it back and find the translation's words.
    back = back_asr.transcribe(_speech_in(out))
    assert back.language == "en"
    said = {w.strip(".,!?").lower() for w in spoken.split()}
    heard = {w.strip(".,!?").lower() for w in back.text.split()}
    assert len(said & heard) >= 0.5 * len(said), (spoken, back.text)


@pytest.mark.parametrize("precision", ["int8", "fp32"])
def test_translate_a_real_clip_in_both_precisions(default_pack, speech_dir, tmp_path, precision):
    """INT8 is the default; --precision fp32 forces the FP32 twins. Both translate a real clip."""
    from edge_rt.measure.scoring import wer

    out = tmp_path / f"jfk.{precision}.wav"
    args = ["translate", str(speech_dir / "en_librispeech_1089-134686-0000.wav"), "--to", "pt", "-o", str(out), "--json"]
    proc = run_cli(*args, *(["--precision", "fp32"] if precision == "fp32" else []))
    assert proc.returncode == 0, proc.stderr
    utts = json.loads(proc.stdout)["utterances"]
    text = " ".join(u["text"] for u in utts)
    ref = "HE HOPED THERE WOULD BE STEW FOR DINNER TURNIPS AND CARROTS AND BRUISED POTATOES AND FAT MUTTON PIECES " \
          "TO BE LADLED OUT IN THICK PEPPERED FLOUR FATTENED SAUCE"
    assert wer([ref], [text]) < 0.2, text
    assert "jantar" in " ".join(u["translation"] for u in utts).lower()  # "stew for dinner"
    _speech_in(out)


def test_precision_defaults_to_int8():
    from edge_rt.cli import build_parser

    assert build_parser().parse_args(["translate", "x.wav", "--to", "pt"]).precision == "int8"
    assert build_parser().parse_args(["run", "--to", "pt", "--precision", "fp32"]).precision == "fp32"


def test_eval_takes_precision_as_its_precisions():
    """eval's precision flag is --precisions; --precision, as the other commands spell it, must reach it
    (it used to be parsed into an unused field, so `eval --noise --precision fp32` measured int8)."""
    from edge_rt.cli import build_parser

    args = build_parser().parse_args(["eval", "--noise", "--precision", "fp32"])
    assert args.precisions == "fp32" and not hasattr(args, "precision")
    assert build_parser().parse_args(["eval", "--precisions", "int8"]).precisions == "int8"


# Clips on which greedy and a beam of 5 wrote different words through translate on some build; which of
# them differ depends on the build machine's INT8 numerics, so the test picks the first that does here.
BEAM_CLIPS = ("en_librispeech_1089-134686-0001", "en_fleurs_1846", "en_fleurs_luna", "en_jfk", "en_fleurs_1675")


def test_beam_flag_reaches_the_loop_and_is_checked(default_pack, speech_dir, tmp_path):
    """`translate --beam 5` decodes with a beam: on a clip (2 s of silence either side) where the library's
    translate writes other words with a beam of 5 than greedy, the command writes each one's words, greedy's
    without the flag; a bad count is refused by the parser, naming the range."""
    from edge_rt.cli import build_parser
    from edge_rt.pipeline import Pipeline, StageOptions
    from edge_rt.translate import TranslateOptions, translate_audio

    stages = Pipeline.load(default_pack, StageOptions(precision="int8")).stages
    for cid in BEAM_CLIPS:
        audio, rate = sf.read(speech_dir / f"{cid}.wav", dtype="float32")
        pad = np.zeros(2 * rate, np.float32)
        padded = np.concatenate([pad, audio, pad])
        want = {b: " ".join(u.text for u in translate_audio(stages, padded, TranslateOptions("pt", beam_size=b))[0]).lower()
                for b in (1, 5)}
        if want[1] != want[5]:
            break
    else:
        pytest.fail(f"greedy and the beam wrote the same words on every clip of {BEAM_CLIPS}: add a clip")
    clip = tmp_path / "padded.wav"
    sf.write(clip, padded, rate)
    heard = {}
    for beam in ("1", "5"):
        proc = run_cli("translate", str(clip), "--to", "pt", "-o", str(tmp_path / "b.wav"), "--json", "--beam", beam)
        assert proc.returncode == 0, proc.stderr
        heard[int(beam)] = " ".join(u["text"] for u in json.loads(proc.stdout)["utterances"]).lower()
    assert heard == want, (cid, heard, want)
    # Greedy unless asked: the babble gate (LoopOptions.unsure) was tuned on greedy decodes, and a beam's
    # higher-scoring hypothesis of faint babble passes it (tests/test_robustness_input.py, with --beam 5).
    proc = run_cli("translate", str(clip), "--to", "pt", "-o", str(tmp_path / "b.wav"), "--json")
    out = json.loads(proc.stdout)
    assert out["beam_size"] == 1 and " ".join(u["text"] for u in out["utterances"]).lower() == want[1]
    assert build_parser().parse_args(["run", "--to", "pt"]).beam == 1
    for command in (["translate", str(clip), "--to", "pt"], ["run", "--to", "pt"], ["bench"], ["eval", "--noise"]):
        bad = run_cli(*command, "--beam", "0")
        assert bad.returncode == 2 and "--beam takes 1 (greedy) to 16" in bad.stderr, bad.stderr
        _no_traceback(bad)


def test_redecode_flag_is_parsed_on_every_loop_command_and_checked():
    """--redecode LOGPROB|off sets LoopOptions.redecode (default RedecodeOptions(): on at -0.5) on translate, run,
    bench and eval --noise; the service reads [loop] redecode_below; a bad value is a named error (exit 2)."""
    from edge_rt.cli import build_parser
    from edge_rt.config import Config
    from edge_rt.loop.options import LoopOptions, RedecodeOptions

    parse = build_parser().parse_args
    assert LoopOptions(target="pt").redecode == RedecodeOptions() == parse(["run", "--to", "pt"]).redecode
    commands = (["translate", "x.wav", "--to", "pt"], ["run", "--to", "pt"], ["bench"], ["eval", "--noise"])
    for command in commands:
        assert parse([*command, "--redecode", "-0.7"]).redecode == RedecodeOptions(below_logprob=-0.7)
        assert parse([*command, "--redecode", "off"]).redecode is None
    assert Config.from_dict({"loop": {"redecode_below": -0.7}}).loop.redecode_below == -0.7
    assert Config().loop.redecode_below == RedecodeOptions.below_logprob
    for command in (commands[0], commands[2]):
        bad = run_cli(*command, "--redecode", "0.3")
        assert bad.returncode == 2 and "--redecode takes off or a log-probability below 0" in bad.stderr, bad.stderr
        _no_traceback(bad)


@pytest.mark.parametrize("flag, field, options, level, key, default", [
    ("--noisy-preroll", "noisy_preroll", "NoisyPrerollOptions", "below_db", "noisy_preroll_below", 20.0),
    ("--sound-start", "sound_start", "SoundStartOptions", "above_db", "sound_start_above", 10.0),
])
def test_preroll_flags_are_parsed_on_every_loop_command_and_checked(flag, field, options, level, key, default):
    """--noisy-preroll DB|off and --sound-start DB|off set LoopOptions.noisy_preroll (default on at 20 dB) and
    LoopOptions.sound_start (default on at 10 dB) on translate, run, bench and eval --noise; the service reads [loop]
    noisy_preroll_below and sound_start_above (0: off); a bad value is a named error (exit 2)."""
    from edge_rt.cli import build_parser
    from edge_rt.config import Config
    from edge_rt.loop import preroll
    from edge_rt.loop.options import LoopOptions

    kind = getattr(preroll, options)
    parse = build_parser().parse_args
    assert getattr(LoopOptions(target="pt"), field) == kind() == getattr(parse(["run", "--to", "pt"]), field)
    assert getattr(kind(), level) == default
    commands = (["translate", "x.wav", "--to", "pt"], ["run", "--to", "pt"], ["bench"], ["eval", "--noise"])
    for command in commands:
        assert getattr(parse([*command, flag, "15"]), field) == kind(**{level: 15.0})
        assert getattr(parse([*command, flag, "off"]), field) is None
    assert getattr(Config.from_dict({"loop": {key: 0}}).loop, key) == 0
    assert getattr(Config().loop, key) == getattr(kind, level)
    with pytest.raises(Exception, match=key):
        Config.from_dict({"loop": {key: -1}})
    bad = run_cli("translate", "x.wav", "--to", "pt", flag, "-3")
    assert bad.returncode == 2 and f"{flag} takes off or a level in dB above 0" in bad.stderr, bad.stderr
    _no_traceback(bad)


def test_split_flag_is_parsed_on_every_loop_command_and_checked():
    """--split TOKENS_PER_S|off sets LoopOptions.split (default SplitOptions(): on at 1.2) on translate, run, bench
    and eval --noise; the service reads [loop] split_below (0: off); a bad value is a named error (exit 2)."""
    from edge_rt.cli import build_parser
    from edge_rt.config import Config
    from edge_rt.loop.options import LoopOptions, SplitOptions

    parse = build_parser().parse_args
    assert LoopOptions(target="pt").split == SplitOptions() == parse(["run", "--to", "pt"]).split
    commands = (["translate", "x.wav", "--to", "pt"], ["run", "--to", "pt"], ["bench"], ["eval", "--noise"])
    for command in commands:
        assert parse([*command, "--split", "2"]).split == SplitOptions(below_tokens_per_s=2.0)
        assert parse([*command, "--split", "off"]).split is None
    assert Config.from_dict({"loop": {"split_below": 0}}).loop.split_below == 0
    assert Config().loop.split_below == SplitOptions.below_tokens_per_s
    with pytest.raises(Exception, match="split_below"):
        Config.from_dict({"loop": {"split_below": -1}})
    for command in (commands[0], commands[2]):
        bad = run_cli(*command, "--split", "-1")
        assert bad.returncode == 2 and "--split takes off or a rate above 0" in bad.stderr, bad.stderr
        _no_traceback(bad)


def test_complete_after_ms_reaches_the_turn_policy_and_is_checked():
    """--complete-after-ms sets TurnOptions.complete_after_ms, with --loudspeaker too (no mode of its own since
    2026-12-06); a value the policy refuses is a named error (exit 2), not a traceback."""
    from edge_rt.cli import build_parser
    from edge_rt.cli.common import _turn_options
    from edge_rt.loop.turn_policy import TurnOptions

    parse = build_parser().parse_args
    assert _turn_options(parse(["run", "--to", "pt"])) == TurnOptions()
    assert _turn_options(parse(["run", "--to", "pt", "--loudspeaker"])) == TurnOptions()
    assert _turn_options(parse(["run", "--to", "pt", "--loudspeaker", "--complete-after-ms", "200"])).complete_after_ms == 200
    assert _turn_options(parse(["translate", "x.wav", "--to", "pt", "--complete-after-ms", "96"])).complete_after_ms == 96
    bad = run_cli("translate", "x.wav", "--to", "pt", "--complete-after-ms", "5000")
    assert bad.returncode == 2 and "--complete-after-ms 5000" in bad.stderr, bad.stderr
    _no_traceback(bad)


def test_bench_prints_each_target_with_its_verdict_and_the_flag_that_would_measure_it():
    """`edge-rt bench`'s closing table (cli/measure.py) from the result's targets (measure/targets.py)."""
    from rich.console import Console

    from edge_rt.cli.measure import _targets_table
    from edge_rt.measure.targets import judge

    result = {"turn_latency_ms": {"p50": 519.8, "p95": 3889.2}, "live_wer_en": 6.05, "paused": None,
              "loop_memory": {"peak_after_warmup_mb": 538.4, "cold_start_s": 0.51}, "loudspeaker": None}
    console = Console(record=True, width=160)
    console.print(_targets_table([v.as_dict() for v in judge(result)], 33))
    text = console.export_text()
    lines = {line.split("│")[2].strip(): line for line in text.splitlines() if line.count("│") >= 5}
    assert "520 ms" in lines["turn latency P50"] and "not met" in lines["turn latency P50"]
    assert "6.0 %" in lines["live English WER (the loop's captions)"] and " met" in lines[
        "live English WER (the loop's captions)"]
    assert "538 MB" in lines["the loop's peak RSS after warm-up"]
    assert "not measured (run with --paused)" in lines["talk-over on the paused set"]
    assert "this run's 33 clips" in text  # the issues set them on the whole speech set
