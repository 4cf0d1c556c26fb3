"""What a pause costs the loop with ONNX Runtime's intra-op threads spinning after their runs or asleep
(``SessionOptions.spinning``; which sessions spin: ``backends.factory.ORT_TUNING``). Each setting runs in its
own process; the settings take turns, round after round:

    python tools/spin_ab.py [--rounds 3] [--pack default] [--items 3] [--seed 5]

Settings: ``all`` (every session spins: ONNX Runtime's default, the loop before 2026-12-07), ``tuned``
(ORT_TUNING as it is: the Whisper decoder alone), ``none``.

Each process loads the pack (INT8, the loop's 2 threads) and, for each of ``--items`` generated utterances (two
calibration sentences read by the recipe's English voices, as the tuning tools make them, cut to 6 s; not the
evaluation clips), runs what the loop runs at a pause, one after another: Whisper (English, transcribe), the
turn model, Marian into Portuguese and the first clause of its speech ("all" is the four); then, apart, all of
the English text's speech in Piper's voice ("piper": what a route into English speaks); one warm-up pass, then
three timed ones. Prints the medians per stage and setting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time

import numpy as np

SETTINGS = ("all", "tuned", "none")
STAGES = ("asr", "turn", "mt", "tts", "all", "piper")


@contextlib.contextmanager
def spinning(setting: str):
    """Inside: the engines a factory makes spin as ``setting`` says (``all``, ``tuned``: ORT_TUNING as it is, or
    ``none``); ORT_TUNING is restored after. Also ``tools/loop_ab.py --vary spinning=...``'s."""
    import edge_rt.backends.factory as factory

    if setting not in SETTINGS:
        raise SystemExit(f"spinning takes {', '.join(SETTINGS)}, got {setting!r}")
    saved = {k: dict(e) for k, e in factory.ORT_TUNING.items()}
    if setting != "tuned":  # every stage, and every "stage/model" entry (which wins over its stage's)
        for key in ("vad", "asr", "mt", "tts", "turn", *(k for k in saved if "/" in k)):
            factory.ORT_TUNING[key] = {**saved.get(key, {}), "spinning": setting == "all"}
    try:
        yield
    finally:
        factory.ORT_TUNING.clear()
        factory.ORT_TUNING.update(saved)


def child(setting: str, pack: str, items: int, seed: int) -> dict[str, list[float]]:
    from tune_unsure import talkers_and_stages

    with spinning(setting):
        talkers, stages = talkers_and_stages(pack, seed)  # the same sentences in every process (seeded)
    audio = [np.concatenate([talkers.say("en"), talkers.say("en")])[: 6 * 16000] for _ in range(items)]
    times: dict[str, list[float]] = {s: [] for s in STAGES}
    for rep in range(4):
        for a in audio:
            t = [time.perf_counter()]
            text = stages.asr.transcribe(a, language="en").text
            t.append(time.perf_counter())
            stages.turn.probability(a)
            t.append(time.perf_counter())
            translation = stages.mt.translate(text, "en", "pt")
            t.append(time.perf_counter())
            next(iter(stages.tts.clauses(translation, "pt")), None)
            t.append(time.perf_counter())
            if rep:  # the first pass warms the arenas and caches
                for i, stage in enumerate(STAGES[:4]):
                    times[stage].append((t[i + 1] - t[i]) * 1000)
                times["all"].append((t[-1] - t[0]) * 1000)
            t0 = time.perf_counter()
            list(stages.tts.clauses(text, "en"))  # all of it, Piper's English voice (a route into English)
            if rep:
                times["piper"].append((time.perf_counter() - t0) * 1000)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pack", default="default")
    ap.add_argument("--items", type=int, default=3)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.pack, args.items, args.seed)))
        return 0
    times = {s: {stage: [] for stage in STAGES} for s in SETTINGS}
    for _ in range(args.rounds):
        for setting in SETTINGS:
            child_args = ["--child", setting, "--pack", args.pack, "--items", str(args.items), "--seed", str(args.seed)]
            out = subprocess.run([sys.executable, __file__, *child_args], capture_output=True, text=True,
                                 check=True).stdout
            for stage, values in json.loads(out.splitlines()[-1]).items():
                times[setting][stage].extend(values)
    print(f"median ms over {len(times['tuned']['all'])} passes each ({args.items} items x 3 x {args.rounds} rounds)")
    print(f"{'spinning':10s}" + "".join(f"{s:>9s}" for s in STAGES))
    for setting in SETTINGS:
        print(f"{setting:10s}" + "".join(f"{statistics.median(times[setting][s]):9.1f}" for s in STAGES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
