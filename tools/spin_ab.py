"""What a pause costs the loop with ONNX Runtime's intra-op threads spinning while each run lasts, on after
their runs, or asleep (``SessionOptions.spinning``, which ``backends.factory.ORT_TUNING`` may set per session).
Each setting runs in its own process; the settings take turns, round after round:

    python tools/spin_ab.py [--rounds 3] [--pack default] [--items 3] [--seed 5] [--settings always,decoder,off,run]

Settings: ``always`` (every session's threads spin on after its runs: ONNX Runtime's default, the loop before
2026-12-07), ``decoder`` (the Whisper decoder's spin on after its runs, every other session's sleep: the
twenty-eighth session's default), ``off`` (every session's sleep, between ops too), ``run`` (every session's spin
while its runs last and stop when they return: the default since the twenty-ninth session), ``tuned``
(``backends.factory.ORT_TUNING`` and ``SessionOptions`` as they are).

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

SETTINGS = ("always", "decoder", "off", "run", "tuned")
STAGES = ("asr", "turn", "mt", "tts", "all", "piper")


def check_setting(setting: str, what: str = "spinning") -> str:
    """``setting`` if it is one of :data:`SETTINGS`; else exits naming them (``what``: the flag that took it)."""
    if setting not in SETTINGS:
        raise SystemExit(f"{what} takes {', '.join(SETTINGS)}, got {setting!r}")
    return setting


@contextlib.contextmanager
def spinning(setting: str):
    """Inside: the engines a factory makes spin as ``setting`` says (one of :data:`SETTINGS`); ORT_TUNING is
    restored after. Also ``tools/loop_ab.py --vary spinning=...``'s."""
    import edge_rt.backends.factory as factory

    check_setting(setting)
    saved = {k: dict(e) for k, e in factory.ORT_TUNING.items()}
    if setting != "tuned":  # every stage, and every "stage/model" entry (which wins over its stage's)
        for key in ("vad", "asr", "mt", "tts", "turn", "asr/decoder", *(k for k in saved if "/" in k)):
            value = setting if setting != "decoder" else "always" if key == "asr/decoder" else "off"
            factory.ORT_TUNING[key] = {**saved.get(key, {}), "spinning": value}
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
    ap.add_argument("--settings", default="always,decoder,off,run",
                    help=f"comma-separated, of {', '.join(SETTINGS)}")
    ap.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    settings = args.settings.split(",")
    for setting in settings:
        if setting not in SETTINGS:
            ap.error(f"--settings takes {', '.join(SETTINGS)}, got {setting!r}")
    if args.child:
        print(json.dumps(child(args.child, args.pack, args.items, args.seed)))
        return 0
    times = {s: {stage: [] for stage in STAGES} for s in settings}
    for _ in range(args.rounds):
        for setting in settings:
            child_args = ["--child", setting, "--pack", args.pack, "--items", str(args.items), "--seed", str(args.seed)]
            out = subprocess.run([sys.executable, __file__, *child_args], capture_output=True, text=True,
                                 check=True).stdout
            for stage, values in json.loads(out.splitlines()[-1]).items():
                times[setting][stage].extend(values)
    passes = len(times[settings[0]]["all"])
    print(f"median ms over {passes} passes each ({args.items} items x 3 x {args.rounds} rounds)")
    print(f"{'spinning':10s}" + "".join(f"{s:>9s}" for s in STAGES))
    for setting in settings:
        print(f"{setting:10s}" + "".join(f"{statistics.median(times[setting][s]):9.1f}" for s in STAGES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
