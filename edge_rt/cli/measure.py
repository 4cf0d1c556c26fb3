"""`edge-rt bench`, `eval` and `selftest`: the commands that produce numbers."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from edge_rt.cli.common import _turn_options, paused_options
from edge_rt.errors import EdgeRtError


def _cmd_soak(args: argparse.Namespace) -> int:
    from rich.console import Console

    from edge_rt.measure.soak import SoakOptions, soak

    console = Console(stderr=True)
    opts = SoakOptions(minutes=args.soak, pack=args.pack, precision=args.precision, threads=args.threads,
                       backend=args.backend,
                       clips=tuple(args.clip), warmup_s=args.soak_warmup_s,
                       speech_dir=Path(args.speech_dir) if args.speech_dir else None)
    result = soak(opts, log=lambda s: console.print(
        f"{s['t_s']:7.0f} s  RSS {s['rss_mb']:6.1f} MB  lag {s['capture_lag_s']:5.2f} s  playback "
        f"{s['playback_backlog_s']:5.2f} s  overruns {s['overruns']}  utterances {s['utterances']}", highlight=False,
        soft_wrap=True))
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        rss, lag = result["rss_mb"], result["capture_lag_s"]
        console.print(f"soak {opts.minutes:g} min: RSS {rss['warm']:.0f} → {rss['end']:.0f} MB after warm-up "
                      f"({rss['growth_pct_after_warmup']:+.1f} %), lag max {lag['first_half_max']:.2f} s / "
                      f"{lag['second_half_max']:.2f} s (1st / 2nd half), overruns {result['capture']['overruns']}, "
                      f"utterances {result['utterances']['total']}", highlight=False)
    return 0


def _speculation(args: argparse.Namespace) -> dict:
    """BenchOptions keywords for --no-speculation / --speculate-after-ms (absent: the loop's default)."""
    if args.no_speculation:
        return {"speculate_after_ms": None}
    return {} if args.speculate_after_ms is None else {"speculate_after_ms": args.speculate_after_ms}


def _cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from edge_rt.audio.echo_path import EchoPath
    from edge_rt.measure.bench import BenchOptions, bench

    if args.soak is not None:
        return _cmd_soak(args)
    console = Console(stderr=True)

    def log(r):
        ms = lambda v: f"{v:7.0f}" if v is not None else "      -"  # noqa: E731
        lat = f"{ms(r.turn_latency_ms)} ms" if r.status in ("ok", "not run") else f"{r.status.upper():>10}"
        peer = f"  peer {ms(r.peer_ms)} ms" if r.peer_ms is not None else ""
        tt = r.turn_taking or {}
        over = f"  TALK-OVER by {tt['over_by_ms']:.0f} ms" if tt.get("talk_over") else ""
        name = f"{r.id} (paused)" if r.pauses else r.id
        console.print(f"{name:34} {r.lang}→{r.target} turn {lat}  serial {ms(r.serial_ms)} ms{peer}  "
                      f"finish lag {ms(tt.get('finish_lag_ms'))} ms{over}  {r.reason or r.translation[:60]}",
                      highlight=False)

    recorded = None
    if args.check:
        recorded = json.loads(Path(args.check).read_text())
        args.clip = args.clip or recorded["clips"]
    elif args.record_check and not args.clip and Path(args.record_check).is_file():
        args.clip = json.loads(Path(args.record_check).read_text())["clips"]  # re-record on the same clips
    opts = BenchOptions(pack=args.pack, precision=args.precision, threads=args.threads, backend=args.backend,
                        clips=tuple(args.clip),
                        limit=args.limit, baseline=not args.no_baseline, partials=not args.no_partials,
                        turn_policy=not args.no_turn_policy, **_speculation(args), peer=args.peer, peer_wait_ms=args.peer_wait_ms,
                        speed_repeats=5 if (args.check or args.record_check) else 0,
                        slowdown=os.environ.get("EDGE_RT_BENCH_SLOWDOWN", ""),  # test hook: measure/slowdown.py
                        speech_dir=Path(args.speech_dir) if args.speech_dir else None, paused=paused_options(args),
                        memory=args.memory, beam_size=args.beam, redecode=args.redecode, split=args.split,
                        noisy_preroll=args.noisy_preroll, sound_start=args.sound_start,
                        loudspeaker=args.loudspeaker, lead=args.lead, room_tone=args.room_tone,
                        loudspeaker_echo=None if args.no_echo else EchoPath(),
                        turn=_turn_options(args))
    result = bench(opts, log=log)
    if args.record_check:
        from edge_rt.measure.perf_check import record_check

        record_check(result, [c["id"] for c in result["clips"]], args.record_check)
    ok = True
    if recorded is not None:
        from edge_rt.measure.perf_check import check_regression

        ok, msg = check_regression(result, recorded)
        result["check"] = {"ok": ok, "message": msg}
        console.print(msg, highlight=False)
    if args.plot:
        from edge_rt.measure.plots import bench_plot

        bench_plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        lat, r = result["turn_latency_ms"], result
        peer = f"; peer P50 {r['peer_p50_ms']:.0f} ms (x{r['speedup_vs_peer'] or 0:.2f})" if r["peer_p50_ms"] else ""
        serial = (f"; serial P50 {r['serial_p50_ms']:.0f} ms (x{r['speedup_vs_serial'] or 0:.2f})"
                  if r["serial_p50_ms"] else "; no serial baseline")  # --no-baseline: nothing to compare with
        console.print(f"turn latency P50 {lat['p50'] or 0:.0f} ms, P95 {lat['p95'] or 0:.0f} ms "
                      f"({r['clips_measured']} of {len(r['clips'])} clips){serial}{peer}; peak RSS "
                      f"{r['rss_mb_peak']:.0f} MB; cold start {r['cold_start_s']:.1f} s", highlight=False)
        if r.get("loop_memory"):
            m = r["loop_memory"]
            console.print(f"the loop alone (fresh process, into pt, {m['clips']} clips): peak RSS after warm-up "
                          f"{m['peak_after_warmup_mb']:.0f} MB, cold start {m['cold_start_s']:.2f} s", highlight=False)
        pc = r["phrase_cache"]
        console.print(f"phrase cache: {pc['hits']} of {pc['lookups']} translations reused, "
                      f"{pc['saved_ms']:.0f} ms saved", highlight=False)
        if r["failed"]:
            console.print(f"FAILED clips (the last utterance produced no speech): {', '.join(r['failed'])}",
                          highlight=False)
        console.print(_turn_taking_line("", r), highlight=False)
        if r.get("paused"):
            p = r["paused"]
            console.print(_turn_taking_line(f"paused set ({p['options']['pause_ms']} ms pause, "
                                            f"{len(p['clips'])} clips, {len(p['skipped'])} without a pause point): "
                                            f"turn P50 {p['turn_latency_ms']['p50'] or 0:.0f} ms; ", p)
                          + f"; talk-over at the pause {_pct(p['talk_over_at_pause_rate'])}", highlight=False)
        if r.get("loudspeaker"):
            s = r["loudspeaker"]
            console.print(f"loudspeaker mode: turn P50 {s['turn_latency_ms']['p50'] or 0:.0f} ms; against the headset run "
                          f"of the same clips, P50 x{s['p50_ratio'] or 0:.3f}, median of the per-clip ratios "
                          f"x{s['per_clip_median_ratio'] or 0:.3f} ({s['clips_paired']} clips; headset first "
                          f"x{s['per_clip_median_ratio_by_first']['headset'] or 0:.3f}, loudspeaker first "
                          f"x{s['per_clip_median_ratio_by_first']['loudspeaker'] or 0:.3f}); talk-over "
                          f"{_pct(s['talk_over_rate'])}, live English WER {s['live_wer_en']} %, front end "
                          f"{s.get('frontend_ms_per_hop') or 0:.2f} ms per hop "
                          f"({'echo ' + str(s['echo']) if s['echo'] else 'no echo'})", highlight=False)
            console.print(f"loudspeaker mode: its own voice translated {s['own_voice_turns']} times "
                          f"({s['clips_with_own_voice']} clips)", highlight=False)
            if s.get("peer"):
                p = s["peer"]
                console.print(f"package stack beside the same loudspeaker (no echo canceller): its own voice "
                              f"translated {p['own_voice_turns']} times ({p['clips_with_own_voice']} of "
                              f"{p['clips']} clips); turn P50 {p['turn_latency_ms']['p50'] or 0:.0f} ms; English WER "
                              f"{p['live_wer_en']} %",
                              highlight=False)
            if s.get("peer_half_duplex"):
                h = s["peer_half_duplex"]
                console.print(f"... that stack muting its microphone while it speaks: its own voice translated "
                              f"{h['own_voice_turns']} times; turn P50 {h['turn_latency_ms']['p50'] or 0:.0f} ms; "
                              f"English WER {h['live_wer_en']} %", highlight=False)
        console.print(_targets_table(r["targets"], len(r["clips"])))
    return 0 if ok else 1


def _targets_table(targets: list[dict], clips: int):
    """The issues' targets judged on this run of ``clips`` clips (measure/targets.py), as a rich table."""
    from rich.table import Table

    style = {"met": "green", "not met": "bold red", "not measured": "dim"}
    # the issues set them on the whole speech set (33 clips): a run on a few (--clip, --limit, --check) is a hint
    table = Table(title=f"targets, judged on this run's {clips} clip{'' if clips == 1 else 's'}, settings and machine",
                  title_justify="left")
    for col in ("issue", "target", "limit", "measured", "verdict"):
        table.add_column(col, justify="right" if col in ("limit", "measured") else "left")
    for t in targets:
        digits = {"ms": 0, "MB": 0, "%": 1, "s": 2, "x": 3, "turns": 0}.get(t["unit"], 2)
        value = "-" if t["value"] is None else f"{t['value']:.{digits}f} {t['unit']}"
        verdict = t["state"] + (f" (run with {t['flag']})" if t["state"] == "not measured" and t["flag"] else "")
        table.add_row(str(t["issue"]), t["name"], f"≤ {t['limit']:g} {t['unit']}", value,
                      f"[{style[t['state']]}]{verdict}[/]")
    return table


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f} %"


def _turn_taking_line(head: str, r: dict) -> str:
    lag = r["finish_lag_ms"]
    ms = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    live = ", ".join(f"{lang} {v['metric'].upper()} {v['value']:.1f} %" for lang, v in r["live_wer"].items()) or "-"
    return (f"{head}talk-over {_pct(r['talk_over_rate'])} of clips; finish lag P50 {ms(lag['p50'])} ms, "
            f"P95 {ms(lag['p95'])} ms; live captions {live}")


# -- operations: serve, doctor, replay, report (systemd/README.md) ---------------


def _cmd_eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from edge_rt.measure.eval import EvalOptions, evaluate

    if getattr(args, "noise", False):  # edge_rt/cli/noise.py
        from edge_rt.cli.noise import cmd_eval_noise

        return cmd_eval_noise(args, args.precisions or "int8")
    if args.paused or args.pause_ms is not None:
        raise EdgeRtError("eval --paused mixes paused clips with noise: add --noise (e.g. edge-rt eval --noise "
                          "--paused --kinds pink --snr 5); for the live paused-speech set use edge-rt bench --paused")
    precisions = tuple((args.precisions or "int8,fp32").split(","))
    for p in precisions:
        if p not in ("int8", "fp32"):
            raise EdgeRtError(f"--precisions takes int8 and/or fp32 separated by commas, not {p!r}")
    result = evaluate(EvalOptions(pack=args.pack, precisions=precisions, threads=args.threads, backend=args.backend,
                                  clips=tuple(args.clip), limit=args.limit, spoken=not args.no_spoken))
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    table = Table("precision", "ASR WER/CER % (whole clips)", "live segmentation", "chrF", "BLEU", "ASR-BLEU",
                  "round-trip WER %")
    for p, r in result["precisions"].items():
        asr = ", ".join(f"{lang} {v['value']:.1f}" for lang, v in r["asr"].items())
        live = ", ".join(f"{lang} {v['value']:.1f}" for lang, v in r["asr_live_segmentation"].items())
        table.add_row(p, asr, live, str(r["translation"]["chrf"]), str(r["translation"]["bleu"]),
                      str(r["asr_bleu"]["bleu"]), str(r.get("spoken_roundtrip_wer")))
    Console().print(table)
    return 0


def _cmd_selftest(args: argparse.Namespace) -> int:
    from edge_rt.ops.selftest import SelftestOptions, selftest

    opts = SelftestOptions(pack=args.pack, out=Path(args.out), limit=args.limit, accuracy=not args.no_accuracy,
                           latency=not args.no_latency)
    result = selftest(opts, log=lambda m: print(m, file=sys.stderr))
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    elif result.get("skipped"):
        print(f"skipped: {result['reason']}")
    else:
        print(Path(result["report"]).read_text())
        print(f"wrote {result['report']} and selftest.json: send them back")
    return 0
