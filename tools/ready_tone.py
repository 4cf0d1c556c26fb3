#!/usr/bin/env python
"""How long a ready tone AEC3 needs before a talker survives our first reply (offline, real AEC3, no models).

A kiosk: everything played is heard again through an echo path; en_jfk talks, and 3 s in our first reply
(2 s of en_fleurs_1938 at -18 dBFS) starts over them. Before that, at start, the ready tone (audio/tone.py)
plays for each length asked. Prints how far under its own level the talker comes out of the front end while
the reply plays (its first 0.75 s and all of it). Echo paths: ``flat`` (6 dB down, 40 ms late: the live
test's), ``room`` (the same plus a 15-ms decaying tail of seeded noise, a generated room) and ``none`` (the
microphone never hears the loudspeaker: a file run without an echo path).

    python tools/ready_tone.py [--tone-ms 0,300,500,1000] [--path room|flat|none]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.audio.clock import CaptureClock  # noqa: E402
from edge_rt.audio.files import read_audio  # noqa: E402
from edge_rt.audio.frontend import AEC3_LAG, DELAY, FrontEnd, FrontEndOptions  # noqa: E402
from edge_rt.audio.sinks import RingSink  # noqa: E402
from edge_rt.audio.tone import ready_tone  # noqa: E402
from edge_rt.build.calibration.gate import speech_dir as default_speech_dir  # noqa: E402
from edge_rt.units import SAMPLE_RATE, VAD_FRAME  # noqa: E402

T0 = 10**12


def db(x: np.ndarray) -> float:
    """Mean power in dBFS (-120 for silence)."""
    return 10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-12)


def through_front_end(far: np.ndarray, near: np.ndarray, options: FrontEndOptions,
                      on_hop: Callable[[FrontEnd], None] = lambda fe: None) -> np.ndarray:
    """``near`` (16 kHz) through a front end whose reference is a sink playing ``far`` 40 ms ahead of the worker;
    ``on_hop`` is called with the front end after each 32-ms hop. Returns its output, ``options.lag`` samples late."""
    sink = RingSink(SAMPLE_RATE, capacity=1 << 21)
    sink.write(far)
    clock = CaptureClock()
    clock.anchor(0, T0)
    fe = FrontEnd.for_loop(options, clock, sink)
    out, buf, consumed = np.zeros(len(near), np.float32), np.empty(320, np.float32), 0
    for first in range(0, len(near) - VAD_FRAME + 1, VAD_FRAME):
        while consumed < first + VAD_FRAME + 640:  # the sink plays 40 ms ahead of the worker
            sink.consume(buf, T0 + consumed * 1_000_000_000 // SAMPLE_RATE)
            consumed += len(buf)
        hop = near[first : first + VAD_FRAME].copy()
        fe.process(first, hop)
        on_hop(fe)
        out[first : first + VAD_FRAME] = hop
    return out


def echo_path(kind: str) -> np.ndarray:
    d = int(0.040 * SAMPLE_RATE)
    h = np.zeros(d + int(0.09 * SAMPLE_RATE), np.float32)
    h[d] = 0.0 if kind == "none" else 0.5
    if kind == "room":
        n = int(0.08 * SAMPLE_RATE)
        h[d + 1 : d + 1 + n] += (np.random.default_rng(5).normal(size=n) * np.exp(-np.arange(n) / (0.015 * SAMPLE_RATE))
                                 * 0.15).astype(np.float32)
    return h


def under_reply(tone_ms: int, path: np.ndarray, speech_dir: Path, options: FrontEndOptions = FrontEndOptions()):
    talker = read_audio(speech_dir / "en_jfk.wav")[: 6 * SAMPLE_RATE]
    reply = read_audio(speech_dir / "en_fleurs_1938.wav")[: 2 * SAMPLE_RATE]
    reply = (reply * (10 ** (-18 / 20) / np.sqrt(np.mean(reply**2)))).astype(np.float32)
    tone = ready_tone(SAMPLE_RATE, tone_ms, options.ready_tone_db)
    t0 = len(tone) + SAMPLE_RATE
    r0 = t0 + 3 * SAMPLE_RATE
    far = np.zeros(t0 + len(talker) + SAMPLE_RATE, np.float32)
    far[: len(tone)] = tone
    far[r0 : r0 + len(reply)] = reply
    near = np.convolve(far, path)[: len(far)].astype(np.float32)
    near[t0 : t0 + len(talker)] += talker
    near += np.random.default_rng(0).normal(0, 1e-3, len(near)).astype(np.float32)  # a microphone's floor
    out = through_front_end(far, near, options)
    lag, d = DELAY + AEC3_LAG, int(np.argmax(np.abs(path)))
    rows = []
    for stop in (r0 + 3 * SAMPLE_RATE // 4, r0 + len(reply)):
        a, b = r0 + d, stop
        rows.append(db(out[a + lag : b + lag]) - db(talker[a - t0 : b - t0]))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tone-ms", default="0,300,500,1000")
    ap.add_argument("--path", choices=("flat", "room", "none"), default="room")
    args = ap.parse_args(argv)
    speech_dir = default_speech_dir()
    path = echo_path(args.path)
    for ms in (int(v) for v in args.tone_ms.split(",")):
        first, whole = under_reply(ms, path, speech_dir)
        print(f"ready tone {ms:4d} ms, {args.path} echo path: the talker under our first reply {first:+.1f} dB "
              f"(its first 0.75 s), {whole:+.1f} dB (all 2 s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
