#!/usr/bin/env python
"""Two (or more) settings of the live loop, in one run, clip by clip: turn latency, talk-over and the live captions' WER.

Replays every clip of the speech set, and its paused version (``edge-rt bench --paused``: a 600 ms pause
inserted at a word boundary), live as `edge-rt bench` does, once with each of two values of one knob, the
order alternating from clip to clip: ``complete_after_ms`` (TurnOptions: the pause at which a sentence
judged complete ends), ``beam_size`` (LoopOptions: beam search for the text that is translated),
``redecode`` (LoopOptions: ``off`` or the log-probability below which a greedy decode is decoded again
with a beam), ``preroll_ms`` (EndpointOptions: audio kept before an utterance's first speech frame), ``postroll_ms`` (EndpointOptions:
audio decoded after its last speech frame) or
``noisy_preroll`` (LoopOptions: ``off`` or the dB below which an utterance opening out of noise starts further back),
``sound_start`` (LoopOptions: ``off``, ``on`` or the dB above the room's floor of a sound the pre-roll should not cut),
``onset`` (LoopOptions: ``off``, ``on`` or the dBFS under which the lead of a turn's first clause is not played),
``source_mark`` (TurnOptions.source_mark_langs: ``off``, ``on`` or languages joined by ``+``, whose transcript's end
mark may take a translation's place),
``repeat_words`` (LoopOptions: ``off`` or the words of a run written twice in a row that is said once) or
``lend_within_s`` (ContextOptions: ``off`` or the seconds within which a dropped utterance is lent to the next)
or ``loudspeaker`` (``off``, ``frontend``, ``frontend+64``, ``on``: `run --loudspeaker` in parts; ``on+MS``: all of
it with ``complete_after_ms`` MS; each with ``-tone``: no ready tone, ``-echo``: no echo path; a run with the front
end hears its own playback 6 dB down and 40 ms late, as in `bench --loudspeaker`; ``-pass``: the front end's output
even where nothing played, no passthrough (FrontEndOptions.passthrough_after_ms None); ``-floor``: AEC3's reference
without its floor (FrontEndOptions.reference_floor_dbfs None); ``-late``: the passthrough as late as the front end's
output (FrontEndOptions.passthrough_in_time False, the default until 2026-12-07); ``on@POLICY``: barge-in POLICY
instead of loudspeaker mode's). With a loudspeaker value among them, every setting's clip comes after the same
silence (bench.LOUDSPEAKER_LEAD)
or ``barge_in`` (LoopOptions: what someone talking over our speech does to it, with a headset) or ``turn_calls``
(``all`` or ``needed``: the end-of-turn model at every one of ``TurnOptions.model_at_ms``, or only where a decision
that can end the pause reads it, ``TurnPolicy.model_frames``, the loop's) or ``held_postroll_ms`` (LoopOptions: ``off`` or the
ms of a held pause's tail its second decode hears). More than two
values are run in turn, each first on one clip in N; the ratios are against the first.
Prints per clip and setting the turn latency, whether a translation started before the speaker's final
end (talk-over), the finish lag and how many translations were resaid (barge-in ``resay``), both settings' captions
where they differ, then for each setting and set: turn latency P50/P95, the talk-over rate, the English WER of the
live captions, the finish lag P50/P95, and the paired latency ratio. Needs an idle machine (~25 min for the 33 clips
and their paused versions with two settings).

    python tools/loop_ab.py [--vary complete_after_ms=64,256 | beam_size=1,5 | redecode=off,-0.5 | preroll_ms=192,320 | postroll_ms=0,64
                             | noisy_preroll=off,20 | sound_start=off,on | repeat_words=off,3 | lend_within_s=off,2
                             | onset=off,on | source_mark=off,on
                             | loudspeaker=off,frontend,frontend+64,on | loudspeaker=on+64,on | loudspeaker=off,on-tone,on | loudspeaker=off,on-pass,on
                             | loudspeaker=off,on-late,on
                             | loudspeaker=on@pause,on | barge_in=continue,resay | turn_calls=all,needed
                             | held_postroll_ms=off,64 | spinning=decoder,run]
                            [--limit N] [--ids ID,ID]
                            [--no-paused | --paused-only]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.audio.echo_path import EchoPath  # noqa: E402
from edge_rt.audio.files import read_audio  # noqa: E402
from edge_rt.loop.context import ContextOptions  # noqa: E402
from edge_rt.loop.endpoint import EndpointOptions  # noqa: E402
from edge_rt.loop.onset import OnsetOptions  # noqa: E402
from edge_rt.loop.options import RedecodeOptions, loudspeaker_mode  # noqa: E402
from edge_rt.loop.output import BARGE_IN  # noqa: E402
from edge_rt.loop.preroll import NoisyPrerollOptions, SoundStartOptions  # noqa: E402
from edge_rt.loop import turn_policy  # noqa: E402
from edge_rt.loop.turn_policy import TurnOptions  # noqa: E402
from edge_rt.measure import bench  # noqa: E402
from edge_rt.measure.paused import PauseOptions, paused_clip  # noqa: E402
from edge_rt.measure.turn_taking import live_error_rates  # noqa: E402
from spin_ab import check_setting, spinning  # noqa: E402  (tools/, this script's own folder)


# knob -> LoopOptions fields for one value of it (as written on the command line)
KNOBS = {
    "complete_after_ms": lambda v: {"turn": dataclasses.replace(TurnOptions(), complete_after_ms=int(v))},
    # the pause length at which the end-of-utterance work is done ahead (LoopOptions.speculate_after_ms), ms
    "speculate_after_ms": lambda v: {"speculate_after_ms": int(v)},
    "beam_size": lambda v: {"beam_size": int(v)},
    # off, or the log-probability below which a greedy decode is decoded again with a beam of 5
    "redecode": lambda v: {"redecode": None if v == "off" else RedecodeOptions(below_logprob=float(v))},
    # audio kept before an utterance's first speech frame (EndpointOptions)
    "preroll_ms": lambda v: {"endpoint": dataclasses.replace(EndpointOptions(), preroll_ms=int(v))},
    # audio decoded after an utterance's last speech frame (EndpointOptions)
    "postroll_ms": lambda v: {"endpoint": dataclasses.replace(EndpointOptions(), postroll_ms=int(v))},
    # more pre-roll for an utterance that opens out of noise (LoopOptions.noisy_preroll): off or its below_db
    "noisy_preroll": lambda v: {"noisy_preroll": None if v == "off" else NoisyPrerollOptions(below_db=float(v))},
    # an utterance whose pre-roll starts inside a sound, out of a quiet room, starts where the sound does
    # (LoopOptions.sound_start): off, on, or its above_db
    "sound_start": lambda v: {"sound_start": None if v == "off" else SoundStartOptions() if v == "on"
                              else SoundStartOptions(above_db=float(v))},
    # each utterance's speech played from where its first clause sounds (LoopOptions.onset): off, on, or the
    # limit in dBFS under which a sample is silence
    "onset": lambda v: {"onset": None if v == "off" else OnsetOptions() if v == "on"
                        else OnsetOptions(below_dbfs=float(v))},
    # a run of this many words written twice in a row said once (LoopOptions.repeat_words): off or the words
    "repeat_words": lambda v: {"repeat_words": None if v == "off" else int(v)},
    # an utterance the unsure gate dropped lent to one that starts within this many seconds (ContextOptions)
    "lend_within_s": lambda v: {"context": dataclasses.replace(ContextOptions(),
                                                               lend_within_s=None if v == "off" else float(v))},
    # loudspeaker mode in parts: off (a headset), frontend (its capture front end alone), frontend+64 (with
    # complete_after_ms 64, loudspeaker mode's until 2026-12-06), on (all of `run --loudspeaker`: also barge-in
    # resay, pause before 2026-12-06; loop.options.loudspeaker_mode), on+MS (all of it with complete_after_ms MS)
    "loudspeaker": lambda v: _loudspeaker(v),
    # a pause the speculation's evidence holds open decoded again with this much of its tail (LoopOptions): off or ms
    "held_postroll_ms": lambda v: {"held_postroll_ms": None if v == "off" else int(v)},
    # what someone talking over the translated speech does to it, with a headset (LoopOptions.barge_in)
    "barge_in": lambda v: {"barge_in": v},
    # a translation whose end mark holds a pause judged on its transcript's mark in the speaker's language
    # (TurnOptions.source_mark_langs): off, on (the defaults' languages) or languages joined by "+" (de+es)
    "source_mark": lambda v: {"turn": dataclasses.replace(TurnOptions(), source_mark_langs=(
        () if v == "off" else TurnOptions().source_mark_langs if v == "on" else tuple(v.split("+"))))},
    # the end-of-turn model's calls: "needed" (TurnPolicy.model_frames, the loop's) or "all" of model_at_ms (the
    # loop before 2026-12-06, which also ran it at 64 ms, where no decision that can end the pause reads it)
    "turn_calls": lambda v: {"_all_calls": _turn_calls(v)},
    # when ONNX Runtime sessions' threads spin (SessionOptions.spinning), one of tools/spin_ab.py's settings:
    # "always" (ONNX Runtime's default, the loop before 2026-12-07), "decoder" (the Whisper decoder's alone, the
    # twenty-eighth session's), "off", "run" (while each run lasts: the default since) or "tuned" (as the code
    # has it); each value has its own stages, loaded with that setting
    "spinning": lambda v: {"_spinning": check_setting(v, "--vary spinning")},
}


def _stages_spinning(options: bench.BenchOptions, v: str):
    """The bench's stages with their sessions' threads spinning as ``v`` says (tools/spin_ab.py's settings)."""
    with spinning(v):
        return bench.load_bench_stages(options)[1]


def _turn_calls(v: str) -> bool:
    if v not in ("all", "needed"):
        raise SystemExit(f"--vary turn_calls takes all or needed, got {v!r}")
    return v == "all"


@contextlib.contextmanager
def _every_turn_call(on: bool):
    """While ``on``: turn policies made now run the model at every one of ``model_at_ms``."""
    if not on:
        yield
        return
    pruned = turn_policy.model_frames
    turn_policy.model_frames = lambda o, hangover_ms: pruned(o, hangover_ms, every=True)
    try:
        yield
    finally:
        turn_policy.model_frames = pruned


# --vary loudspeaker's suffixes that leave a part of the front end out -> the FrontEndOptions field and its value
_WITHOUT = {"tone": ("ready_tone_ms", 0), "pass": ("passthrough_after_ms", None),
            "floor": ("reference_floor_dbfs", None), "late": ("passthrough_in_time", False)}


def _loudspeaker(v: str) -> dict:
    from edge_rt.audio.frontend import FrontEndOptions

    parts = {"off": {}, "frontend": {"frontend": FrontEndOptions()},
             "frontend+64": {"frontend": FrontEndOptions(), "turn": dataclasses.replace(TurnOptions(), complete_after_ms=64)},
             "on": {"loudspeaker": True}}
    v, _, barge_in = v.partition("@")  # on@duck: barge-in duck instead of loudspeaker mode's default
    # on-tone: no ready tone; on-echo: no echo path; on-pass: no passthrough where nothing played (the front end's
    # output always, FrontEndOptions.passthrough_after_ms None); on-floor: AEC3's reference without its floor
    # (FrontEndOptions.reference_floor_dbfs None: exact zeros where nothing plays); on-late: the passthrough `lag`
    # samples late (FrontEndOptions.passthrough_in_time False); on-tone-echo: neither tone nor echo
    base, *without = v.split("-")
    if base.startswith("on+") and base[3:].isdigit():  # all of it, with another complete_after_ms
        out = {"loudspeaker": True, "turn": dataclasses.replace(TurnOptions(), complete_after_ms=int(base[3:]))}
    elif base in parts and set(without) <= {"echo", *_WITHOUT}:
        out = dict(parts[base])
    else:
        raise SystemExit(f"--vary loudspeaker takes {', '.join(parts)} or on+MS, each with -tone, -echo, -pass, "
                         f"-floor and/or -late; got {v!r}")
    if barge_in and (barge_in not in BARGE_IN or not out.get("loudspeaker")):
        raise SystemExit(f"--vary loudspeaker: @POLICY goes with on (on@duck), POLICY one of {', '.join(BARGE_IN)}; got {v!r}")
    return {**out, "_echo": "echo" not in without, "_without": dict(_WITHOUT[w] for w in without if w in _WITHOUT),
            **({"barge_in": barge_in} if barge_in else {})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pack", default="default")
    ap.add_argument("--vary", default="complete_after_ms=64,256", metavar="KEY=A,B",
                    help="the knob and its two values: complete_after_ms=64,256, beam_size=1,5 or redecode=off,-0.5")
    ap.add_argument("--limit", type=int, default=None, help="at most this many clips")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--no-paused", action="store_true", help="only the clips as recorded")
    which.add_argument("--paused-only", action="store_true", help="only the paused set (a pause inserted in each clip)")
    ap.add_argument("--ids", default=None, help="only these clips (comma-separated ids)")
    args = ap.parse_args(argv)
    options = bench.BenchOptions(pack=args.pack, baseline=False, backend="cpu")
    clips = bench.load_clips(options)
    if args.ids:
        ids = args.ids.split(",")
        if unknown := set(ids) - {c["id"] for c in clips}:
            ap.error(f"--ids: no clip {', '.join(sorted(unknown))} in the speech set's manifest")
        clips = [c for c in clips if c["id"] in ids]
    clips = clips[: args.limit]
    key, _, values = args.vary.partition("=")
    if key not in KNOBS or len(values.split(",")) < 2:
        ap.error(f"--vary takes KEY=A,B[,C...] with KEY one of {', '.join(KNOBS)}, got {args.vary!r}")
    names = [f"{key}={v}" for v in values.split(",")]
    try:
        setting = {n: KNOBS[key](v) for n, v in zip(names, values.split(","))}
    except ValueError as e:  # a value that is not a number where the knob takes one, or one its options refuse
        ap.error(f"--vary {key}: {values!r} holds a value the knob does not take ({e})")
    _, stages = bench.load_bench_stages(options)
    stages_of = {n: _stages_spinning(options, s["_spinning"]) if "_spinning" in s else stages
                 for n, s in setting.items()}
    # with a loudspeaker setting among them, every setting's clip comes after the same silence (bench.LOUDSPEAKER_LEAD)
    lead = any(s.get("loudspeaker") or s.get("frontend") for s in setting.values())
    rows: dict[str, list] = {"real": [], "paused": []}
    k = 0
    for clip in clips:
        audio = read_audio(clip["path"])
        items = [] if args.paused_only else [("real", audio, bench.oracle_end(stages.vad, audio), ())]
        if not args.no_paused:
            p = paused_clip(clip["id"], audio, stages.vad, PauseOptions())
            if p is not None:
                items.append(("paused", p.audio, p.final_end, p.pauses))
        for kind, a, end, pauses in items:
            result = {}
            order = names[k % len(names):] + names[: k % len(names)]  # each setting first in turn
            k += 1
            for name in order:
                loop_opts = options.loop_options(options.target_for(clip["lang"]))
                extra = dict(setting[name])
                echo, without = extra.pop("_echo", True), extra.pop("_without", {})
                all_calls = extra.pop("_all_calls", False)
                extra.pop("_spinning", None)
                if extra.pop("loudspeaker", False):
                    loop_opts = loudspeaker_mode(loop_opts)
                loop_opts = dataclasses.replace(loop_opts, **extra)
                if loop_opts.frontend is not None and without:
                    loop_opts = dataclasses.replace(loop_opts, frontend=dataclasses.replace(loop_opts.frontend, **without))
                # loudspeaker runs hear their playback as `bench --loudspeaker` does (6 dB down, 40 ms late)
                with _every_turn_call(all_calls):
                    run = bench.run_clip(stages_of[name], a, loop_opts, options.tail_s,
                                         EchoPath() if loop_opts.frontend is not None and echo else None, lead=lead)
                t, taking = run.turn(end), run.taking(end, pauses)
                result[name] = (t.latency_ms, taking.talk_over, run.captions.final_text(), taking.finish_lag_ms,
                                sum(tr.resaid for tr in run.traces))
            rows[kind].append((clip, result))
            print(f"{clip['id']} ({kind}) " + "  ".join(
                f"{n}: {_ms(v[0])}{' talk-over' if v[1] else ''}{f' resaid {v[4]}' if v[4] else ''}"
                f" (finish {_ms(v[3])})" for n, v in result.items()), flush=True)
            if len({v[2] for v in result.values()}) > 1:  # the captions differ: say how
                for n, v in result.items():
                    print(f"    {n}: {v[2]!r}", flush=True)
    for kind, rs in rows.items():
        if not rs:
            continue
        print(f"\n{kind} ({len(rs)} clips)")
        for n in names:
            lat = [r[n][0] for _, r in rs if r[n][0] is not None]
            over = sum(r[n][1] for _, r in rs)
            wer = live_error_rates((c["lang"], c.get("text", ""), r[n][2]) for c, r in rs if c.get("text"))
            en = wer.get("en", {}).get("value")
            pct = (f"P50 {np.percentile(lat, 50):.0f} ms, P95 {np.percentile(lat, 95):.0f} ms" if lat else "-")
            finish = [r[n][3] for _, r in rs if r[n][3] is not None]
            fin = f"P50 {np.percentile(finish, 50):.0f} ms, P95 {np.percentile(finish, 95):.0f} ms" if finish else "-"
            print(f"  {n}: turn latency {pct} ({len(lat)} measured); talk-over {over}/{len(rs)} ({100 * over / len(rs):.1f} %); "
                  f"live English WER {en} %; finish lag {fin}; resaid {sum(r[n][4] for _, r in rs)}")
        for other in names[1:]:
            both = [(r[other][0], r[names[0]][0]) for _, r in rs if r[names[0]][0] and r[other][0]]
            if both:
                print(f"  {other} / {names[0]}: P50 x{np.median([a for a, _ in both]) / np.median([b for _, b in both]):.3f}, "
                      f"median of the per-clip ratios x{np.median([a / b for a, b in both]):.3f} ({len(both)} clips)")
    return 0


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} ms"


if __name__ == "__main__":
    sys.exit(main())
