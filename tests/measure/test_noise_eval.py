"""`edge-rt eval --noise`: the scoring functions on constructed inputs, and short real runs (tiny pack)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.loop.endpoint import EndpointOptions
from edge_rt.measure.noise import NoiseOptions, noisy_mixes
from edge_rt.measure.noise_eval import (NoiseEvalOptions, evaluate_noise, f1, frames_of, invented, loop_options,
                                        offline_spans, run_loop, segment, vad_counts)
from edge_rt.units import VAD_FRAME


def test_segment_opens_with_preroll_and_closes_after_the_hangover():
    o = EndpointOptions()
    probs = [0.0] * 20 + [0.95] * 30 + [0.0] * 20
    (start, end), = segment(probs, o)
    assert start == 20 * VAD_FRAME - o.preroll_samples
    assert end == 50 * VAD_FRAME  # one past the last speech frame
    assert segment([0.0] * 50, o) == []
    (_, end), = segment([0.0] * 5 + [0.95] * 10, o)  # still open at the end of the stream: flushed
    assert end == 15 * VAD_FRAME


def test_vad_f1_on_constructed_frames_including_failures():
    ref = frames_of([(2 * VAD_FRAME, 6 * VAD_FRAME)], 10)
    assert ref.tolist() == [False, False, True, True, True, True, False, False, False, False]
    assert frames_of([(100, 600)], 4).tolist() == [True, True, False, False]  # any overlap counts
    assert f1(*vad_counts(ref, ref)) == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    late = frames_of([(4 * VAD_FRAME, 8 * VAD_FRAME)], 10)  # half right, half in the noise
    assert vad_counts(ref, late) == (2, 2, 2)
    assert f1(*vad_counts(ref, late))["f1"] == 0.5
    nothing = np.zeros(10, bool)
    assert f1(*vad_counts(ref, nothing)) == {"precision": None, "recall": 0.0, "f1": None}
    assert f1(*vad_counts(ref, ~ref)) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match="differ in length"):
        vad_counts(ref, ref[:-1])


def test_invented_text_is_text_that_overlaps_no_reference_speech():
    ref = [(32000, 96000)]
    utts = [(0, 16000, "Thank you."),  # in the leading noise: invented
            (16000, 40000, "and so my"),  # overlaps the speech: not invented (extra words count in the WER)
            (100000, 120000, " . "),  # punctuation only: no text
            (96000, 110000, "bye")]  # starts where the speech ended: invented
    assert [u[2] for u in invented(utts, ref)] == ["Thank you.", "bye"]
    assert invented(utts, [(0, 200000)]) == []
    assert [u[2] for u in invented(utts, [])] == ["Thank you.", "and so my", "bye"]


@pytest.fixture(scope="module")
def tiny_stages(tiny_pack):
    from edge_rt.pipeline import StageOptions, load_stages

    return load_stages(tiny_pack, StageOptions(precision="int8"))


def test_offline_segmentation_is_the_loops_without_turn_policy(tiny_stages, speech_dir):
    """The endpointer-only VAD F1 (every language, no decoding) rests on this: without the turn policy
    (which needs transcripts) the offline VAD + endpointer decide what the loop decides."""
    pool = {c: read_audio(speech_dir / f"{c}.wav") for c in
            ("en_librispeech_1089-134691-0000", "de_fleurs_sinnvoll", "fr_fleurs_test_005", "en_fleurs_luna")}
    m = next(noisy_mixes({"en_librispeech_1089-134691-0000": pool["en_librispeech_1089-134691-0000"]}, pool,
                         NoiseOptions(kinds=("babble",), snrs_db=(10.0,))))
    lo = loop_options("pt", None, NoiseEvalOptions(loop_overrides=(("turn", None),)))
    assert lo.turn is None and lo.partials is False
    traces, _ = run_loop(tiny_stages, m.audio, lo)
    assert traces
    assert [(t.start_sample, t.end_sample) for t in traces] == offline_spans(tiny_stages.vad, m.audio, lo.endpoint)


def test_one_clip_one_snr_real_run(tiny_pack):
    r = evaluate_noise(NoiseEvalOptions(pack="tiny", clips=("en_jfk",),
                                        noise=NoiseOptions(kinds=("brown",), snrs_db=(10.0,))))
    clean, brown = r["summary"]
    assert (clean["kind"], clean["snr_db"], brown["kind"], brown["snr_db"]) == ("clean", None, "brown", 10.0)
    # The clean run is the reference: its own VAD F1 is 1 by construction. Its WER moves with the loop's
    # segmentation (0 % before the turn policy, 13.6 % with it: "ask not" split off as "And s not").
    assert clean["vad"]["f1"] == 1.0 and clean["loop"]["wer"] <= 20.0, r["mixes"][0]["loop"]
    # Measured: VAD F1 0.97 (loop) / 0.965 (endpointer only), WER 4.5-9.1 %, nothing empty or invented.
    assert brown["mixes"] == 1 and brown["vad"]["f1"] >= 0.85, brown
    assert brown["vad_endpointer"]["f1"] >= 0.85, brown
    assert brown["loop"]["wer"] <= 20.0, r["mixes"]
    assert brown["loop"]["empty"] == 0 and brown["loop"]["invented"] == 0
    assert brown["loop"]["turn_latency_ms"]["p50"] is not None
    row = r["mixes"][-1]
    assert row["id"] == "en_jfk/brown/10dB" and "country" in row["loop"]["text"].lower()


def test_an_experiments_processing_reaches_the_loop_and_not_the_references(tiny_pack):
    """NoiseEvalOptions.enhance (tools/try_noise_suppressor.py): here it silences every mix."""
    seen = []

    def silence(audio):
        seen.append(len(audio))
        return np.zeros_like(audio)

    r = evaluate_noise(NoiseEvalOptions(pack="tiny", clips=("en_jfk",), enhance=silence,
                                        noise=NoiseOptions(kinds=("brown",), snrs_db=(10.0,))))
    clean, brown = r["summary"]
    assert len(seen) == 1  # the one mix, once
    assert clean["loop"]["empty"] == 0 and "country" in r["mixes"][0]["loop"]["text"].lower()  # untouched
    assert brown["loop"]["empty"] == 1 and brown["vad"]["recall"] == 0.0  # the loop heard the silence


def test_hesitations_in_noise_mix_the_paused_clips(tiny_pack, speech_dir):
    """NoiseEvalOptions.paused (eval --noise --paused): each clip gets bench's word-search pause before it is mixed;
    the clean reference is the paused clip too, so the pause counts as no speech."""
    from edge_rt.measure.paused import PauseOptions

    r = evaluate_noise(NoiseEvalOptions(pack="tiny", clips=("en_jfk",), paused=PauseOptions(pause_ms=900),
                                        noise=NoiseOptions(kinds=("brown",), snrs_db=(10.0,))))
    clean, brown = r["summary"]
    assert r["paused"]["pause_ms"] == 900 and r["clips"] == ["en_jfk"]
    recorded = len(read_audio(speech_dir / "en_jfk.wav"))
    assert r["mixes"][0]["loop"]["spans"][-1][1] > recorded  # the clip is 900 ms longer: its speech ends later
    assert "country" in r["mixes"][-1]["loop"]["text"].lower() and brown["mixes"] == 1


def test_cli_rejects_bad_noise_options(tiny_pack):
    for flags, msg in ((["--kinds", "traffic"], "noise kinds are"), (["--snr", "5,loud"], "--snr takes numbers"),
                       (["--precisions", "int8,fp32"], "one precision"), (["--pause-ms", "600"], "needs --paused"),
                       (["--paused", "--pause-ms", "-5"], "--pause-ms")):
        proc = subprocess.run([sys.executable, "-m", "edge_rt", "eval", "--noise", "--pack", "tiny", *flags],
                              capture_output=True, text=True)
        assert proc.returncode == 2 and msg in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "eval", "--paused", "--pack", "tiny"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "add --noise" in proc.stderr, proc.stderr


def test_cli_json(tiny_pack):
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "eval", "--noise", "--pack", "tiny", "--clip", "en_jfk",
                           "--kinds", "pink", "--snr", "20", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["precision"] == "int8" and out["summary"][0]["kind"] == "clean"
    # Measured 27.3 %: the "ask not" fragment (P(no speech) 0.48, log-prob -1.06) is dropped by the loop's
    # unsure gate even at 20 dB, and the drop is named so.
    pink = out["summary"][1]
    assert pink["kind"] == "pink" and pink["loop"]["wer"] <= 40.0
    assert set(pink["loop"]["drops"]) <= {"unsure gate", "whisper no speech"}


def test_summary_of_rows_the_peer_did_not_run_on():
    """--frontend both --peer: the peer runs once per mix (with the first setting); the other setting's
    group summarises the loop alone instead of failing."""
    from edge_rt.measure.noise_eval import _summary

    loop = {"vad": (8, 1, 1), "text": "ask not", "empty": False, "invented": [], "turn_latency_ms": [300.0],
            "drops": [], "langs": ["en"]}
    row = {"lang": "en", "reference": "ask not", "vad_endpointer": None, "loop": loop}
    alone = _summary([row], peer=True)
    assert "peer" not in alone and alone["loop"]["wer"] == 0.0
    with_peer = _summary([{**row, "peer": {"text": "ask", "empty": False, "invented": []}}], peer=True)
    assert with_peer["peer"]["wer"] == 50.0
    assert with_peer["loop_minus_peer"] == {"wer_points": -50.0, "ci95": [-50.0, -50.0], "mixes": 1, "words": 2}


def test_the_difference_to_the_peer_has_a_paired_interval():
    """Loop minus peer WER over the same mixes: the point difference, and a bootstrap interval that holds
    it, narrow when the two err on the same mixes and wide when one mix decides it."""
    from edge_rt.measure.noise_eval import wer_difference

    def row(ref, loop, peer):
        return {"reference": ref, "loop": {"text": loop}, "peer": {"text": peer}}

    ref = "ask not what your country can do for you"  # 9 words
    same = [row(ref, "ask not what your country can do", "ask not what your country can do")] * 10
    d = wer_difference(same)
    assert d == {"wer_points": 0.0, "ci95": [0.0, 0.0], "mixes": 10, "words": 90}
    one_bad = [row(ref, ref, ref)] * 9 + [row(ref, "", ref)]  # the loop lost one whole clip of ten
    d = wer_difference(one_bad)
    assert d["wer_points"] == 10.0 and d["ci95"][0] == 0.0 and 20.0 <= d["ci95"][1] <= 40.0
    behind = [row(ref, "ask what your country can do", ref)] * 10  # 3 words of 9 lost on every mix
    d = wer_difference(behind)
    assert d["wer_points"] == d["ci95"][0] == d["ci95"][1] == 33.33
