"""Live captions equal `edge-rt translate` on the same audio (issue 10: no lost words in live mode).

The harness plays real clips, one of them with a 0.6 s hesitation spliced mid-sentence, into
`edge-rt run` through the JACK dummy server at real time; edge-rt records what it captured
(``--record``). The test rebuilds that capture in float32 from the program played (see
:func:`rebuild_capture`), runs the translate path on it (the same loop over a file, as fast as it
can, without partial captions) and requires the same utterances with the same words. So partial
decodes, speculation at pauses, the turn policy and the worker's timing under real-time capture
cannot change what is heard."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.audio.wav_stream import read_wav
from edge_rt.measure.scoring import normalize
from edge_rt.units import SAMPLE_RATE
from tests.jack import Harness, PERIOD, RATE, release, start_edge_rt, stop_edge_rt

GAP_S = 2.5  # silence between clips: each clip is its own utterance(s); within ContextOptions.within_s
HESITATION_S = 0.6
# en_fleurs_1728: "... how acidic | basic alkaline the chemical is", cut at the VAD's dip before "basic"
SPLICE = ("en_fleurs_1728", 3.20)
CLIPS = ("en_librispeech_1089-134691-0001", "de_fleurs_sinnvoll")


def spliced(audio: np.ndarray, at_s: float, pause_s: float = HESITATION_S) -> np.ndarray:
    """``audio`` with ``pause_s`` of near-silence (room noise at -80 dBFS) inserted at ``at_s``."""
    cut = int(at_s * SAMPLE_RATE)
    noise = np.random.default_rng(0).standard_normal(int(pause_s * SAMPLE_RATE)).astype(np.float32) * 1e-4
    return np.concatenate([audio[:cut], noise, audio[cut:]])


def program(speech_dir: Path) -> np.ndarray:
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), np.float32)
    parts = [gap[: SAMPLE_RATE // 2], spliced(read_audio(speech_dir / f"{SPLICE[0]}.wav"), SPLICE[1])]
    for clip in CLIPS:
        parts += [gap, read_audio(speech_dir / f"{clip}.wav")]
    return np.concatenate(parts).astype(np.float32)


def rebuild_capture(captured: np.ndarray, played: np.ndarray, period: int = PERIOD) -> np.ndarray:
    """The float32 samples edge-rt heard, from its PCM16 recording and the float32 program played.

    JACK moves whole periods bit for bit, but on a loaded machine a late client repeats or skips one
    (the capture then drifts against the program). Each captured period is matched to the played
    period (or silence) it equals within PCM16 rounding, searching near the last match.
    """
    tol = 1.01 / 32768
    played = np.concatenate([played, np.zeros(period - len(played) % period, np.float32)])  # the last period
    out = np.zeros(len(captured), np.float32)
    ptr = None  # played position expected at the next captured period
    for k in range(0, len(captured) - period + 1, period):
        got = captured[k : k + period]
        if ptr is None:
            if np.abs(got).max() < tol:
                continue  # silence before the program
            ptr = 0
        candidates = [ptr] + [ptr + d * period for j in range(1, 64) for d in (j, -j)]
        for c in candidates:
            if 0 <= c <= len(played) - period and np.abs(played[c : c + period] - got).max() <= tol:
                out[k : k + period] = played[c : c + period]
                ptr = c + period
                break
        else:
            if np.abs(got).max() >= tol:
                pytest.fail(f"captured period at sample {k} is nowhere in the program: the capture is not what "
                            f"the harness played")
    return out


def words(text: str, lang: str) -> list[str]:
    return normalize(text, lang=lang).split()


@pytest.mark.slow
def test_live_captions_equal_translate_on_the_same_audio(jack, default_pack, speech_dir, tmp_path):
    played = program(speech_dir)
    harness = Harness(played)
    proc = None
    trace_path, record = tmp_path / "trace.jsonl", tmp_path / "session"
    try:
        proc, lines = start_edge_rt(
            ["run", "--to", "pt", "--device-in", "0", "--device-out", "0", "--rate-in", str(RATE),
             "--rate-out", str(RATE), "--trace", str(trace_path), "--record", str(record)], harness)
        harness.play()
        while not harness.done_playing:
            time.sleep(0.1)
        time.sleep(4.0)  # the last utterance: hangover, decode, translate
        out = stop_edge_rt(proc, lines)
    finally:
        release(proc, harness)
    print(out.strip().splitlines()[-1])  # "stopped: ... capture overruns N": a lost period is silence in both
    live = [json.loads(line) for line in trace_path.read_text().splitlines()]

    # What edge-rt heard, in float32 (input.wav is PCM16; see rebuild_capture).
    captured, rate = read_wav(record / "input.wav")
    assert rate == SAMPLE_RATE
    audio = rebuild_capture(captured, played)

    from edge_rt.pipeline import Pipeline, StageOptions
    from edge_rt.translate import TranslateOptions, translate_audio

    stages = Pipeline.load(default_pack, StageOptions(precision="int8")).stages
    offline, _, _ = translate_audio(stages, audio, TranslateOptions(target="pt"))

    heard = [(t["start_sample"], t["end_sample"], t["lang"], t["text"]) for t in live if t["text"]]
    expected = [(round(u.start_s * SAMPLE_RATE), round(u.end_s * SAMPLE_RATE), u.lang, u.text) for u in offline]
    report = "\n".join([f"live:      {h}" for h in heard] + [f"translate: {e}" for e in expected])
    print(report)
    assert [h[:3] for h in heard] == [e[:3] for e in expected], f"different utterances:\n{report}"
    for h, e in zip(heard, expected):
        assert words(h[3], h[2]) == words(e[3], e[2]), f"different words:\n{report}"
    # Nothing lost: the hesitation's second half is there, in English.
    joined = " ".join(" ".join(words(h[3], h[2])) for h in heard)
    assert "alkaline" in joined and "chemical" in joined, report
