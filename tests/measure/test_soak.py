"""Soak: `edge-rt bench --soak` feeds real speech and silence at real time; memory, lag and audio loss stay flat.

CI runs 1.75 minutes (tiny pack); the 30-minute run on the default pack is a manual step (README).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edge_rt.audio.sources import BLOCK
from edge_rt.loop.overload import OverloadOptions
from edge_rt.measure.soak import PlaylistSource, SoakOptions, summarize
from edge_rt.units import SAMPLE_RATE

CLIPS = ("en_librispeech_1089-134686-0001", "en_fleurs_1675", "en_jfk", "en_librispeech_1995-1837-0001")
MINUTES = 1.75  # a 44 s warm-up pass, then a minute measured


@pytest.fixture(scope="module")
def soak_report(tiny_pack) -> dict:
    args = [sys.executable, "-m", "edge_rt", "bench", "--soak", str(MINUTES), "--pack", "tiny", "--json",
            *[a for c in CLIPS for a in ("--clip", c)]]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=MINUTES * 60 + 120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1))
    return report


def test_soak_memory_does_not_grow_after_warm_up(soak_report):
    rss = soak_report["rss_mb"]
    assert soak_report["warmup_s"] >= 30 and len(soak_report["samples"]) >= 20
    assert rss["growth_pct_after_warmup"] < 5.0, rss


def test_soak_loses_no_audio_and_lag_does_not_grow(soak_report):
    assert soak_report["capture"]["overruns"] == 0 and soak_report["capture"]["dropped_samples"] == 0
    lag = soak_report["capture_lag_s"]
    assert lag["max"] < OverloadOptions().drop_s, lag  # bounded: the policy never had to drop anything
    assert lag["second_half_max"] <= lag["first_half_max"] + 2.0, lag  # and not creeping up
    assert soak_report["overload"]["utterances_dropped"] == 0
    assert soak_report["utterances"]["stage_errors"] == 0


def test_soak_kept_translating(soak_report):
    # four clips per ~44 s pass: about nine clips in 1.75 minutes, each one utterance or more
    assert soak_report["utterances"]["spoken"] >= 7, soak_report["utterances"]
    utterances = [s["utterances"] for s in soak_report["samples"]]
    assert utterances == sorted(utterances) and utterances[-1] > utterances[len(utterances) // 2]


def test_summary_arithmetic():
    samples = [{"t_s": t, "rss_mb": 100.0 + (10 if t >= 10 else t), "capture_lag_s": 0.1 * (t % 3),
                "playback_backlog_s": 0.0} for t in range(0, 41, 5)]
    s = summarize(samples, warmup_s=10)
    assert s["rss_mb"]["warm"] == 110 and s["rss_mb"]["end"] == 110 and s["rss_mb"]["growth_pct_after_warmup"] == 0
    assert s["rss_mb"]["start"] == 100 and s["capture_lag_s"]["max"] == pytest.approx(0.2)


def test_playlist_source_repeats_the_cycle_then_goes_silent():
    cycle = np.arange(1000, dtype=np.float32)
    src = PlaylistSource(cycle, duration_s=3 * BLOCK / SAMPLE_RATE)
    src._run()  # the pacing thread's body, inline
    got = src.ring.read(src.ring.available())[1]
    assert np.array_equal(got[: 3 * BLOCK], np.resize(cycle, 3 * BLOCK)) and not got[3 * BLOCK:].any()
    assert src.finished
    with pytest.raises(ValueError, match="soak minutes"):
        SoakOptions(minutes=0)
