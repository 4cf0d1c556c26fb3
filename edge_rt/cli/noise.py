"""`edge-rt eval --noise`: its flags and its table (the work is in edge_rt/measure/noise_eval.py)."""

from __future__ import annotations

import argparse
import json

from edge_rt.cli.common import (add_noisy_preroll_arg, add_paused_args, add_redecode_arg, add_sound_start_arg,
                                add_split_arg, beam_size, paused_options)
from edge_rt.errors import EdgeRtError


def add_noise_args(e: argparse.ArgumentParser) -> None:
    """The --noise flags of ``edge-rt eval``."""
    from edge_rt.measure.noise import NOISE_KINDS

    g = e.add_argument_group("noise robustness (--noise)")
    g.add_argument("--noise", action="store_true",
                   help="mix the clips with noise and score per kind and SNR: VAD F1, WER (en), empty clips, "
                        "invented text in noise-only stretches, turn latency (default precision: int8)")
    g.add_argument("--kinds", default=",".join(NOISE_KINDS),
                   help=f"comma-separated noise kinds ({', '.join(NOISE_KINDS)})")
    g.add_argument("--snr", default="0,5,10,20", help="comma-separated SNRs in dB over the clips' speech frames")
    g.add_argument("--clips", type=int, default=None, metavar="N", help="at most N clips per language")
    g.add_argument("--peer", action="store_true",
                   help="also faster-whisper (same Whisper weights, int8, its Silero vad_filter) on the same mixes")
    g.add_argument("--given-language", action="store_true",
                   help="give both sides the clip's language (default: detect, like `edge-rt translate`)")
    g.add_argument("--seed", type=int, default=None, help="noise seed (default: NoiseOptions.seed)")
    g.add_argument("--frontend", choices=("off", "on", "both"), default="off",
                   help="the capture front end in the loop: on = WebRTC noise suppression (level 1) + high-pass "
                        "(edge_rt/audio/frontend.py); both = each mix twice (default off)")
    g.add_argument("--beam", type=beam_size, default=1, metavar="N",
                   help="the loop's beam search for the text it translates (LoopOptions.beam_size; default 1)")
    add_redecode_arg(g)
    add_split_arg(g)
    add_noisy_preroll_arg(g)
    add_sound_start_arg(g)
    add_paused_args(g, "hesitations in noise: mix and score, for the loop and the peer alike, the clips")
    e.set_defaults(precisions=None)  # --precisions: int8,fp32 for the plain eval, int8 with --noise


def _difference(d: dict | None) -> str:
    """``+3.2 [-4.1, +10.0]``: WER points the product is behind the peer (negative: ahead), 95 % interval."""
    return "-" if d is None else f"{d['wer_points']:+.1f} [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as err:
        raise EdgeRtError(f"{flag} takes numbers separated by commas, e.g. 5,10; got {text!r}") from err


def cmd_eval_noise(args: argparse.Namespace, precision: str) -> int:
    from rich.console import Console
    from rich.table import Table

    from edge_rt.loop.preroll import NoisyPrerollOptions, SoundStartOptions
    from edge_rt.loop.redecode import RedecodeOptions
    from edge_rt.loop.split import SplitOptions
    from edge_rt.measure.noise import NoiseOptions
    from edge_rt.measure.noise_eval import NoiseEvalOptions, evaluate_noise

    if precision not in ("int8", "fp32"):
        raise EdgeRtError(f"--noise runs one precision: --precisions int8 or fp32, not {precision!r}")
    kw = {} if args.seed is None else {"seed": args.seed}
    try:
        noise = NoiseOptions(kinds=tuple(k.strip() for k in args.kinds.split(",") if k.strip()),
                             snrs_db=_floats(args.snr, "--snr"), **kw)
    except ValueError as err:
        raise EdgeRtError(str(err)) from err
    opts = NoiseEvalOptions(pack=args.pack, precision=precision, threads=args.threads, backend=args.backend,
                            clips=tuple(args.clip), limit=args.clips, noise=noise, peer=args.peer,
                            given_language=args.given_language, paused=paused_options(args),
                            frontends=("off", "on") if args.frontend == "both" else (args.frontend,),
                            loop_overrides=((("beam_size", args.beam),) if args.beam != 1 else ())
                            + ((("redecode", args.redecode),) if args.redecode != RedecodeOptions() else ())
                            + ((("split", args.split),) if args.split != SplitOptions() else ())
                            + ((("noisy_preroll", args.noisy_preroll),)
                               if args.noisy_preroll != NoisyPrerollOptions() else ())
                            + ((("sound_start", args.sound_start),) if args.sound_start != SoundStartOptions() else ()))
    console = Console(stderr=True)
    def log(r: dict) -> None:
        loop = r.get("loop") or {}
        console.print(f"{r['id']:44} {r['frontend']:3}  {'EMPTY ' if loop.get('empty') else ''}"
                      f"{loop.get('text', '')[:70]}", highlight=False, soft_wrap=True)

    result = evaluate_noise(opts, log=log)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    table = Table("front end", "noise", "SNR dB", "VAD F1", "VAD F1 all langs", "WER %", "empty", "invented",
                  "turn P50 ms", "dropped (why)", *(("WER - peer [95 %]",) if args.peer else ()),
                  title=f"eval --noise: {args.pack} {precision}" + (" (peer: faster-whisper)" if args.peer else ""))
    for s in result["summary"]:
        a, p = s.get("loop", {}), s.get("peer")
        both = lambda key: f"{a.get(key)}" + (f" / {p[key]}" if p else "")  # noqa: E731
        drops = ", ".join(f"{k} {v}" for k, v in a.get("drops", {}).items())
        snr = "-" if s["snr_db"] is None else f"{s['snr_db']:g}"
        table.add_row(s["frontend"], s["kind"], snr, str(s.get("vad", {}).get("f1")),
                      str((s["vad_endpointer"] or {}).get("f1", "-")),
                      both("wer"), both("empty"), both("invented"), str(a.get("turn_latency_ms", {}).get("p50")),
                      drops, *((_difference(s.get("loop_minus_peer")),) if args.peer else ()))
    Console().print(table)
    if args.peer:
        Console().print("product / peer where two numbers are given; WER - peer: the product's WER minus the peer's "
                        "in points, 95 % interval of a paired bootstrap over the mixes", highlight=False)
    return 0
