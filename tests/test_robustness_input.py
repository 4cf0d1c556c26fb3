"""Bad input, each named or handled: broken files, odd formats, non-speech, clipping, whispers, a minute
without a pause, broken engine files, malformed config. Real clips and real models throughout."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf
import soxr

from edge_rt.build.manifest import integer_products
from edge_rt.audio.files import read_audio
from edge_rt.backends.factory import OrtEngines
from edge_rt.audio.sinks import TimelineSink
from edge_rt.audio.sources import FastFileSource
from edge_rt.backends.ort import OrtEngine
from edge_rt.config import ConfigError, load_config
from edge_rt.errors import AudioInputError, PackNotBuiltError
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.pack import BuiltPack
from edge_rt.measure.noise import make_noise
from edge_rt.measure.scoring import wer
from edge_rt.stages.gain import GainOptions, contrast_db, floor_spread_db, speech_like, utterance_gain
from edge_rt.stages.vad import SileroVad
from edge_rt.units import SAMPLE_RATE

SR = SAMPLE_RATE
QUIET = ("en_fleurs_1728", "fr_fleurs_test_000", "en_fleurs_luna")  # speech peaks at -57, -55, -52 dBFS
BABBLE = ("en_librispeech_1089-134686-0000", "de_fleurs_test_001", "es_fleurs_test_000", "fr_fleurs_test_003",
          "zh_fleurs_1883", "en_fleurs_1904")


@pytest.fixture(scope="module")
def tiny(tiny_pack):
    return load_stages(tiny_pack)


@pytest.fixture(scope="module")
def default(default_pack):
    return load_stages(default_pack)


@pytest.fixture(scope="module")
def manifest(speech_manifest):
    return {m["id"]: m for m in speech_manifest}


def _run(stages, audio, target="pt", source="en", **kw):
    src = FastFileSource(audio)
    sink = TimelineSink(22050, now_s=lambda: src.ring.read_index / SR)
    loop = Loop(stages, src, sink, LoopOptions(target=target, source=source, partials=False, **kw))
    return loop.run()


def _text(traces) -> str:
    return " ".join(t.text for t in traces if t.text and not t.dropped)


def _at(x: np.ndarray, dbfs: float) -> np.ndarray:
    """``x`` scaled to an RMS of ``dbfs``."""
    return (x / np.sqrt(np.mean(x.astype(np.float64) ** 2)) * 10 ** (dbfs / 20)).astype(np.float32)


# -- files -------------------------------------------------------------------------------
@pytest.mark.parametrize("make,match", [
    (lambda real: b"", "is empty"),
    (lambda real: real[:30], "cannot decode"),  # header cut
    (lambda real: real[:45], "holds no samples"),  # the header and half a sample
    (lambda real: b"RIFF" + real[4:12] + b"garbage!" * 40, "cannot decode"),  # corrupt chunks
], ids=["empty", "truncated-header", "truncated-data", "corrupt"])
def test_bad_audio_files_are_named_by_translate(tmp_path, speech_dir, make, match):
    path = tmp_path / "in.wav"
    path.write_bytes(make((speech_dir / "en_jfk.wav").read_bytes()))
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "translate", str(path), "--to", "pt"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and str(path) in proc.stderr, proc.stderr
    assert proc.stderr.startswith("edge-rt: error:") and "Traceback" not in proc.stderr
    with pytest.raises(AudioInputError, match=match):
        read_audio(path)


def test_a_wav_cut_mid_data_is_read_to_its_last_sample(tmp_path, speech_dir):
    data = (speech_dir / "en_jfk.wav").read_bytes()
    path = tmp_path / "cut.wav"
    path.write_bytes(data[: 44 + 2 * SR * 3 + 1])  # 3 s and half a sample; the header still says 11 s
    audio = read_audio(path)
    assert abs(len(audio) - 3 * SR) <= 1


@pytest.mark.parametrize("rate,channels", [(44100, 2), (8000, 1), (48000, 6)])
def test_other_rates_and_channel_counts_are_resampled_and_downmixed(tmp_path, speech_dir, manifest, tiny, rate,
                                                                    channels):
    clip = "en_librispeech_1995-1837-0001"
    mono = read_audio(speech_dir / f"{clip}.wav")
    x = soxr.resample(mono, SR, rate)
    path = tmp_path / f"in-{rate}-{channels}.wav"
    sf.write(path, np.stack([x] * channels, axis=1), rate, subtype="PCM_16")
    audio = read_audio(path)
    assert abs(len(audio) / SR - len(mono) / SR) < 0.01
    score = wer([manifest[clip]["text"]], [_text(_run(tiny, audio))], lang="en")
    assert score <= 0.15, score


# -- nothing said: no text invented ----------------------------------------------------------
def _non_speech(kind: str, speech_dir) -> np.ndarray:
    rng = np.random.default_rng(7)
    n = 8 * SR
    t = np.arange(n) / SR
    if kind == "silence":
        return np.zeros(n, np.float32)
    if kind == "white":
        return _at(rng.standard_normal(n), -30)
    if kind == "pink":
        f = np.fft.rfftfreq(n, 1 / SR)
        spectrum = (rng.standard_normal(len(f)) + 1j * rng.standard_normal(len(f))) / np.sqrt(np.maximum(f, 20))
        return _at(np.fft.irfft(spectrum, n), -30)
    if kind == "babble":  # six real talkers in four languages, mixed, at a low level
        talkers = [read_audio(speech_dir / f"{c}.wav")[:n] for c in BABBLE]
        return _at(sum(_at(np.pad(x, (0, n - len(x))), -20) for x in talkers), -40)
    if kind == "tone":
        return (0.3 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    if kind == "sweep":
        return (0.3 * np.sin(2 * np.pi * (200 * t + 200 * t * t))).astype(np.float32)
    if kind == "clicks":
        x = np.zeros(n, np.float32)
        x[:: SR // 4] = 0.9
        return x
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["silence", "white", "pink", "babble", "tone", "sweep", "clicks"])
def test_non_speech_gives_no_text(default, speech_dir, kind):
    traces = _run(default, _non_speech(kind, speech_dir), target="en", source=None)
    assert not [(t.lang, t.text) for t in traces if t.text and not t.dropped]


def test_babble_gives_no_text_after_a_beam_decode_either(default, speech_dir):
    """A beam's best hypothesis scores higher than greedy's, over the unsure gate's limit (tuned on greedy
    decodes): the gate judges a greedy transcript of the utterance after a beam decode."""
    traces = _run(default, _non_speech("babble", speech_dir), target="en", source=None, beam_size=5)
    assert not [(t.lang, t.text) for t in traces if t.text and not t.dropped]


def test_babble_through_edge_rt_translate_gives_no_utterance(tmp_path, speech_dir):
    path = tmp_path / "babble.wav"
    sf.write(path, _non_speech("babble", speech_dir), SR, subtype="PCM_16")
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "translate", str(path), "--to", "en", "--json"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["utterances"] == []


def test_whisper_would_invent_text_from_the_babble_without_the_unsure_rule(default, speech_dir):
    """The babble test above is not vacuous: the VAD opens on it and Whisper writes fluent words."""
    traces = _run(default, _non_speech("babble", speech_dir), target="en", source=None, unsure=None)
    assert _text(traces), [(t.text, t.dropped) for t in traces]


# -- loud, quiet, endless -----------------------------------------------------------------------
def test_clipped_speech_is_still_transcribed(tiny, speech_dir, manifest):
    clip = "en_librispeech_1995-1837-0001"
    audio = np.clip(read_audio(speech_dir / f"{clip}.wav") * 30, -1, 1)  # 30 dB too hot, flat-topped
    assert utterance_gain(audio) == 1.0  # no gain on top of clipping
    score = wer([manifest[clip]["text"]], [_text(_run(tiny, audio))], lang="en")
    assert score <= 0.3, score


def test_quiet_speech_is_transcribed_with_automatic_gain(default, speech_dir, manifest):
    rows = []
    for clip in QUIET:
        m = manifest[clip]
        audio = read_audio(speech_dir / m["audio"])
        target = "pt" if m["lang"] == "en" else "en"
        before = wer([m["text"]], [_text(_run(default, audio, target, m["lang"], gain=None))], lang=m["lang"])
        after = wer([m["text"]], [_text(_run(default, audio, target, m["lang"]))], lang=m["lang"])
        rows.append((clip, round(float(20 * np.log10(np.abs(audio).max())), 1), round(before, 3), round(after, 3)))
    print("\nclip, peak dBFS, WER without AGC, WER with AGC:", *rows, sep="\n  ")
    assert all(after <= before for _, _, before, after in rows), rows
    assert sum(r[3] for r in rows) < sum(r[2] for r in rows), rows
    assert all(after <= 0.3 for *_, after in rows), rows


@pytest.mark.slow
def test_quiet_speech_in_steady_noise_is_raised_too(default_pack, speech_dir, speech_manifest, manifest):
    """en_fleurs_1728 (-57 dBFS peak) in the noisy eval's pink noise at 5 dB: its loud frames stand ~10 dB above
    its quiet ones, under min_snr_db. Without the steady-floor rule it got no gain and Whisper called it no
    speech; with it (its floor is steady pink noise) it is raised and heard."""
    from edge_rt.measure.noise import NoiseOptions, noisy_mixes
    from edge_rt.measure.noise_eval import run_loop
    from edge_rt.measure.scoring import normalize

    clip = "en_fleurs_1728"
    stages = load_stages(default_pack, StageOptions(precision="int8"))  # the product's precision, the eval's
    pool = {m["id"]: read_audio(speech_dir / m["audio"]) for m in speech_manifest}
    mix = next(noisy_mixes({clip: pool[clip]}, pool, NoiseOptions(kinds=("pink",), snrs_db=(5.0,))))
    said = {steady: _text(run_loop(stages, mix.audio, LoopOptions(target="pt", partials=False, gain=GainOptions(
        steady_min_snr_db=GainOptions().steady_min_snr_db if steady else None)))[0])
        for steady in (False, True)}  # as the eval runs it (its tail of silence too)
    ref = set(normalize(manifest[clip]["text"], "en").split())
    assert len(ref & set(normalize(said[True], "en").split())) >= 5, said
    if said[False]:  # the premise depends on the build's INT8 numerics (integer_products: VNNI or AVX2 only)
        pytest.skip(f"on this build ({integer_products()} integer products) Whisper hears the mix left quiet too "
                    f"({said[False]!r}): the steady-floor rule has nothing to do here (its case was shown by VNNI "
                    f"builds with int8 decoder weights, before 2026-12-05)")


def test_gain_is_bounded_and_leaves_noise_alone():
    rng = np.random.default_rng(1)
    o = GainOptions()
    assert utterance_gain(_at(rng.standard_normal(SR), -70), o) == 1.0  # steady noise: no gain at all
    for kind in ("pink", "brown"):  # nor for steady noise whose 20-ms frames vary more
        assert utterance_gain(_at(np.asarray(make_noise(kind, rng, 4 * SR), np.float32), -60), o) == 1.0, kind
    bursts = np.concatenate([_at(rng.standard_normal(SR // 2), -70), _at(rng.standard_normal(SR // 2), -100)])
    assert utterance_gain(bursts, o) == pytest.approx(10 ** (o.max_gain_db / 20))  # capped
    loud = np.concatenate([np.full(SR // 4, 0.5, np.float32), np.zeros(SR // 4, np.float32)])
    assert utterance_gain(loud, o) == 1.0  # never attenuates, never clips
    assert utterance_gain(np.zeros(10, np.float32), o) == 1.0


def test_a_low_contrast_counts_as_speech_only_over_a_steady_floor():
    """10 dB between loud and quiet frames: speech over a fan (the quietest frames within 1 dB of each other)
    is raised; a room of talkers (levels spread as a normal of 4.3 dB: no steady floor) is not
    (GainOptions.steady_*)."""
    rng = np.random.default_rng(3)
    db = lambda x: 10 ** (np.asarray(x) / 20)  # noqa: E731
    over_fan = db(np.concatenate([rng.uniform(-60.5, -59.5, 40), rng.uniform(-55, -49, 60)]))
    room = db(rng.normal(-55, 4.3, 400))
    o = GainOptions()
    assert 9 < contrast_db(over_fan) < 11 and 9 < contrast_db(room) < 12
    assert floor_spread_db(over_fan) < 1 < o.steady_floor_db < floor_spread_db(room)
    assert speech_like(over_fan, o) and not speech_like(room, o)
    assert not speech_like(over_fan, GainOptions(steady_min_snr_db=None))  # the rule, not the contrast alone
    with pytest.raises(ValueError, match="steady_min_snr_db"):
        GainOptions(min_snr_db=6, steady_min_snr_db=7)


def test_a_minute_of_speech_without_a_pause_is_cut_at_the_maximum_length(tiny, speech_dir, manifest):
    vad = tiny.vad
    parts = []
    for m in manifest.values():
        if m["lang"] == "en":
            x = read_audio(speech_dir / m["audio"])
            speech = np.repeat(vad.probabilities(x) >= 0.5, 512)[: len(x)]  # drop every pause
            parts.append(x[speech])
    audio = np.concatenate(parts)[: 62 * SR]
    assert len(audio) >= 60 * SR
    o = LoopOptions(target="pt")
    traces = _run(tiny, audio)
    assert "max_length" in {t.end_reason for t in traces}, [(t.start_sample, t.end_sample, t.end_reason)
                                                            for t in traces]
    longest = o.endpoint.max_utterance_s * SR + o.endpoint.preroll_samples
    assert all(t.end_sample - t.start_sample <= longest for t in traces)
    spoken = [t for t in traces if t.text and not t.dropped]
    assert sum(len(t.text.split()) for t in spoken) >= 120  # ~2 words/s heard, not thrown away
    covered = sum(t.end_sample - t.start_sample for t in traces)
    assert covered >= 0.9 * len(audio)  # every part of the minute went to some utterance


# -- engine files and config ------------------------------------------------------------------------
def test_truncated_and_foreign_engine_files_are_named(tiny_pack, speech_dir, tmp_path):
    real = tiny_pack.model("vad", "silero")
    truncated = tmp_path / "silero.onnx"
    truncated.write_bytes(real.read_bytes()[: real.stat().st_size // 2])
    foreign = tmp_path / "encoder.onnx"
    foreign.write_bytes((speech_dir / "en_jfk.wav").read_bytes()[:50000])  # a WAV where a graph should be
    for path in (truncated, foreign):
        with pytest.raises(PackNotBuiltError, match="corrupt or truncated") as e:
            OrtEngine(path)
        assert str(path) in str(e.value) and "build_engines.py" in str(e.value)
    # through a pack: the manifest names a file that is cut short
    manifest = json.loads((tiny_pack.dir / "manifest.json").read_text())
    manifest["stages"]["vad"]["models"]["silero"] = {"fp32": str(truncated)}
    pack = BuiltPack("broken", tmp_path, manifest)
    with pytest.raises(PackNotBuiltError, match="silero.onnx"):
        SileroVad.from_pack(pack, engines=OrtEngines(pack))


@pytest.mark.parametrize("text,match", [
    (b"\x00\xff\xfe binary", "not valid TOML|cannot read"),
    (b"[audio\nrate_in = 16000\n", "not valid TOML"),
    (b'[audio]\nrate_in = "fast"\n', "audio.rate_in must be an integer"),
    (b"[pack]\nthreads = 0\n[metrics]\nbind = \"everywhere\"\n", "pack.threads.*metrics.bind"),
    (b"[loop]\nhangover_ms = 1e9\n", "loop.hangover_ms"),
], ids=["binary", "syntax", "type", "values", "range"])
def test_malformed_config_is_a_named_config_error(tmp_path, text, match):
    path = tmp_path / "config.toml"
    path.write_bytes(text)
    with pytest.raises(ConfigError, match=f"(?s){match}"):
        load_config(path)
