#!/usr/bin/env python
"""What the capture front end costs per hop, and what it cancels, with and without the reference floor (offline,
real AEC3, no models).

A kiosk, as the loop runs one: the ready tone plays at start and its echo reaches the microphone (6 dB down, 40 ms
late, over a microphone floor at -60 dBFS); then a person talks with nothing of ours playing (en_fleurs_1728, 5 s);
then our reply plays (en_fleurs_1938 at -18 dBFS, 4 s) and 2 s into it en_jfk talks on under it. For each setting of
``FrontEndOptions.reference_floor_dbfs`` it prints the front end's time per 32-ms hop in each stretch (min of
``--repeat`` runs, the worker's own cost), how far the echo is taken down where only our reply plays (after 1 s of
it), and the talker's level out of the front end against its level in, under the reply.

    python tools/frontend_cost.py [--floors none,-140,-120,-100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.audio.files import read_audio  # noqa: E402
from edge_rt.audio.frontend import AEC3_LAG, DELAY, FrontEndOptions  # noqa: E402
from edge_rt.audio.tone import ready_tone  # noqa: E402
from edge_rt.build.calibration.gate import speech_dir as default_speech_dir  # noqa: E402
from edge_rt.units import SAMPLE_RATE, VAD_FRAME  # noqa: E402
from ready_tone import db, through_front_end  # noqa: E402  (tools/, this script's own folder)

SR = SAMPLE_RATE


def scene(speech_dir: Path, options: FrontEndOptions) -> dict:
    """The far end, the near end and where each stretch lies (sample ranges)."""
    tone = ready_tone(SR, options.ready_tone_ms, options.ready_tone_db)
    person = read_audio(speech_dir / "en_fleurs_1728.wav")[: 5 * SR]
    reply = read_audio(speech_dir / "en_fleurs_1938.wav")[: 4 * SR]
    reply = (reply * (10 ** (-18 / 20) / np.sqrt(np.mean(reply**2)))).astype(np.float32)
    talker = read_audio(speech_dir / "en_jfk.wav")[: 2 * SR]
    p0 = len(tone) + SR  # the person starts, nothing of ours playing
    r0 = p0 + len(person) + SR  # our reply starts
    t0 = r0 + 2 * SR  # the talker starts under it
    far = np.zeros(r0 + len(reply) + SR, np.float32)
    far[: len(tone)] = tone
    far[r0 : r0 + len(reply)] = reply
    d = int(0.040 * SR)
    near = np.zeros(len(far), np.float32)
    near[d:] = 0.5 * far[:-d]
    near[p0 : p0 + len(person)] += person
    near[t0 : t0 + len(talker)] += talker
    near += np.random.default_rng(0).normal(0, 1e-3, len(near)).astype(np.float32)
    return {"far": far, "near": near, "talker": talker,
            "stretches": {"tone": (0, len(tone)), "person, nothing played": (p0, p0 + len(person)),
                          "our reply alone": (r0 + SR, t0), "talker under our reply": (t0, t0 + len(talker))}}


def run(s: dict, options: FrontEndOptions) -> tuple[np.ndarray, np.ndarray]:
    """The front end's output and its time per hop (ns), hop by hop."""
    busy = []
    out = through_front_end(s["far"], s["near"], options, lambda fe: busy.append(fe.busy_ns))
    return out, np.diff(busy, prepend=0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--floors", default="none,-100", help="reference_floor_dbfs settings (none: no floor)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per setting; the per-hop cost is the min over them")
    args = ap.parse_args(argv)
    speech_dir = default_speech_dir()
    lag = DELAY + AEC3_LAG
    for v in args.floors.split(","):
        options = dataclasses.replace(FrontEndOptions(), reference_floor_dbfs=None if v == "none" else float(v))
        s = scene(speech_dir, options)
        runs = [run(s, options) for _ in range(args.repeat)]
        out, cost = runs[0][0], np.min([c for _, c in runs], axis=0)
        parts = []
        for name, (a, b) in s["stretches"].items():
            parts.append(f"{name} {np.mean(cost[a // VAD_FRAME : b // VAD_FRAME]) / 1e6:.2f}")
        a, b = s["stretches"]["our reply alone"]
        erle = db(s["near"][a:b]) - db(out[a + lag : b + lag])
        a, b = s["stretches"]["talker under our reply"]
        under = db(out[a + lag : b + lag]) - db(s["talker"][: b - a])
        print(f"reference_floor_dbfs {v}: ms per hop: {'; '.join(parts)}; whole run {np.mean(cost) / 1e6:.2f}", flush=True)
        print(f"    echo taken down {erle:.1f} dB (our reply alone); the talker under our reply {under:+.1f} dB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
