"""``edge-rt``: the only module that reads argv or prints for humans."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from edge_rt.errors import EdgeRtError


def _add_pack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pack", default="default", help="built pack name under engines/ or its folder (default: default)")
    p.add_argument("--precision", choices=("fp32", "int8"), default="int8",
                   help="engine precision (default int8: the build's gated INT8 models, each falling back to fp32 "
                        "where the build kept it in fp32, see engines/<pack>/build_report.md; fp32 forces fp32)")
    p.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads per engine (default 2)")


def _cmd_translate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from edge_rt.audio.files import read_audio, write_audio
    from edge_rt.loop.stages import StageOptions, Stages
    from edge_rt.pack import BuiltPack
    from edge_rt.translate import TranslateOptions, translate_audio

    console = Console(stderr=True)
    audio = read_audio(args.input)  # fail on a bad file before loading any model
    out = Path(args.output) if args.output else Path(args.input).with_name(f"{Path(args.input).stem}.{args.to}.wav")
    pack = BuiltPack.load(args.pack)
    t0 = time.perf_counter()
    stages = Stages.load(pack, StageOptions(precision=args.precision, threads=args.threads))
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    utts, track, rate = translate_audio(stages, audio, TranslateOptions(target=args.to, source=args.source))
    write_audio(out, track, rate)
    run_s = time.perf_counter() - t1
    if args.json:
        print(json.dumps({"utterances": [u.as_dict() for u in utts], "output": str(out),
                          "sample_rate": rate, "load_s": round(load_s, 3), "run_s": round(run_s, 3)},
                         ensure_ascii=False, indent=2))
    else:
        for u in utts:
            console.print(f"[dim]{u.start_s:6.2f}–{u.end_s:6.2f}s[/] [cyan]{u.lang}[/] {u.text}", highlight=False)
            console.print(f"{'':14} [green]{args.to}[/] {u.translation}", highlight=False)
        if not utts:
            console.print("[yellow]no speech found in the input[/]")
        console.print(f"wrote {out} ({len(track) / rate:.1f} s) in {run_s:.1f} s "
                      f"(models loaded in {load_s:.1f} s)", highlight=False)
    return 0


def _cmd_devices(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from edge_rt.audio.devices import list_devices

    devices = list_devices(args.backend)
    if args.json:
        print(json.dumps([d.__dict__ for d in devices], indent=2))
        return 0
    table = Table("index", "name", "host API", "in", "out", "default rate")
    for d in devices:
        table.add_row(str(d.index), d.name, d.hostapi, str(d.max_input_channels), str(d.max_output_channels),
                      f"{d.default_samplerate:.0f}")
    Console().print(table if devices else "no audio devices found (is a sound card or JACK server present?)")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import signal
    import threading

    from rich.console import Console

    from edge_rt.audio.devices import DeviceSink, DeviceSource
    from edge_rt.loop.captions import Captions
    from edge_rt.loop.endpoint import EndpointOptions
    from edge_rt.loop.loop import Loop, LoopOptions
    from edge_rt.loop.stages import StageOptions, Stages
    from edge_rt.pack import BuiltPack
    from edge_rt.loop.trace import TraceWriter

    console = Console(stderr=True)
    stages = Stages.load(BuiltPack.load(args.pack), StageOptions(precision=args.precision, threads=args.threads))
    source = DeviceSource(args.device_in, rate=args.rate_in, backend=args.backend)
    sink = DeviceSink(args.device_out, rate=args.rate_out, backend=args.backend)
    trace = TraceWriter(args.trace) if args.trace else None
    captions = Captions(Console())
    options = LoopOptions(target=args.to, source=args.source, endpoint=EndpointOptions(hangover_ms=args.hangover_ms))
    recording = None
    if args.record:  # field test: session folder + flight recorder (edge_rt/ops/session.py)
        from edge_rt.ops.flight import FlightOptions
        from edge_rt.ops.session import Recording, live_header

        recording = Recording(args.record, live_header(args.pack, args.precision, args.threads, options, source, sink,
                                                       args.latency_budget_ms), sink,
                              flight=FlightOptions(latency_budget_ms=args.latency_budget_ms))
    observers = list(recording.observers) if recording else []
    metrics = None
    if args.metrics_port:
        from edge_rt.ops.metrics import Metrics

        metrics = Metrics()
        metrics.serve(args.metrics_port, args.metrics_bind)
        observers.append(metrics)
    loop = Loop(stages, source, recording.sink if recording else sink, options,
                on_caption=captions, trace=trace, observers=observers)

    def stop(signum, frame):
        loop.stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    console.print(f"listening on [{source.info.index}] {source.info.name} ({source.rate} Hz), speaking "
                  f"{args.to} on [{sink.info.index}] {sink.info.name} ({sink.rate} Hz); Ctrl-C stops",
                  highlight=False)
    worker = threading.Thread(target=loop.run, name="edge-rt-loop")
    worker.start()
    while worker.is_alive():
        worker.join(0.2)  # the main thread stays free to take signals
    if metrics is not None:
        metrics.close()
    if trace:
        trace.close()
    if recording:
        recording.close()
        console.print(f"recorded to {recording.dir} (edge-rt replay / edge-rt report)", highlight=False)
    s = source.ring.stats
    console.print(f"stopped: {len(loop.traces)} utterances, capture overruns {s.overruns} "
                  f"({s.dropped} samples), playback underruns {sink.ring.stats.underruns}", highlight=False)
    return 0


def _cmd_soak(args: argparse.Namespace) -> int:
    from rich.console import Console

    from edge_rt.measure.soak import SoakOptions, soak

    console = Console(stderr=True)
    opts = SoakOptions(minutes=args.soak, pack=args.pack, precision=args.precision, threads=args.threads,
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

    from edge_rt.measure.bench import BenchOptions, bench

    if args.soak is not None:
        return _cmd_soak(args)
    console = Console(stderr=True)

    def log(r):
        lat = f"{r.turn_latency_ms:7.0f}" if r.turn_latency_ms is not None else "   miss"
        base = f"{r.baseline_latency_ms:7.0f}" if r.baseline_latency_ms is not None else "      -"
        console.print(f"{r.id:34} {r.lang}→{r.target} turn {lat} ms  serial {base} ms  {r.translation[:60]}",
                      highlight=False)

    recorded = None
    if args.check:
        recorded = json.loads(Path(args.check).read_text())
        args.clip = args.clip or recorded["clips"]
    opts = BenchOptions(pack=args.pack, precision=args.precision, threads=args.threads, clips=tuple(args.clip),
                        limit=args.limit, baseline=not args.no_baseline, partials=not args.no_partials,
                        early_commit=args.early_commit, **_speculation(args),
                        speech_dir=Path(args.speech_dir) if args.speech_dir else None)
    result = bench(opts, log=log)
    if args.record_check:
        from edge_rt.measure.bench import record_check

        record_check(result, [c["id"] for c in result["clips"]], args.record_check)
    ok = True
    if recorded is not None:
        from edge_rt.measure.bench import check_regression

        ok, msg = check_regression(result, recorded)
        result["check"] = {"ok": ok, "message": msg}
        console.print(msg, highlight=False)
    if args.plot:
        from edge_rt.measure.plots import bench_plot

        bench_plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        lat, base = result["turn_latency_ms"], result["baseline_turn_latency_ms"]
        console.print(f"turn latency P50 {lat['p50']:.0f} ms, P95 {lat['p95']:.0f} ms; serial P50 "
                      f"{(base['p50'] or 0):.0f} ms; speed-up {result['speedup_p50'] or 0:.2f}x; "
                      f"peak RSS {result['rss_mb_peak']:.0f} MB; cold start {result['cold_start_s']:.1f} s",
                      highlight=False)
    return 0 if ok else 1


# -- operations: serve, doctor, replay, report (systemd/README.md) ---------------
EX_CONFIG = 78  # sysexits.h: the unit's RestartPreventExitStatus= stops systemd restarting on a bad config


def _serve_overrides(args: argparse.Namespace) -> dict:
    return {"translate__to": args.to, "translate__from": args.source, "pack__name": args.pack,
            "pack__precision": args.precision, "audio__device_in": args.device_in,
            "audio__device_out": args.device_out, "record__dir": args.record}


def _cmd_serve(args: argparse.Namespace) -> int:
    import signal

    from rich.console import Console

    from edge_rt.config import Config, ConfigError, load_config
    from edge_rt.loop.captions import Captions
    from edge_rt.ops.serve import Server
    from edge_rt.ops.service import Notifier

    console = Console(stderr=True)
    try:
        config = (load_config(args.config) if args.config else Config()).override(**_serve_overrides(args))
    except ConfigError as e:
        print(f"edge-rt: error: {e}", file=sys.stderr)
        return EX_CONFIG
    notifier = Notifier.from_env()
    server = Server(config, notifier, log=lambda m: console.print(m, highlight=False, soft_wrap=True),
                    on_caption=Captions(Console()))
    signal.signal(signal.SIGINT, lambda s, f: server.stop())
    signal.signal(signal.SIGTERM, lambda s, f: server.stop())
    try:
        code = server.run()
    finally:
        notifier.close()
    console.print(f"stopped after {server.sessions} audio session(s)", highlight=False)
    return code


def _cmd_doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from edge_rt.config import DEFAULT_CONFIG_PATH, Config, ConfigError, load_config
    from edge_rt.ops.doctor import blocking, run_checks

    path = args.config or (str(DEFAULT_CONFIG_PATH) if DEFAULT_CONFIG_PATH.is_file() else None)
    problem = None
    config = Config()
    if path:
        try:
            config = load_config(path)
        except ConfigError as e:
            problem = str(e)
    checks = run_checks(config, problem, verify_hashes=not args.quick)
    failed = blocking(checks)
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [c.as_dict() for c in checks]}, ensure_ascii=False, indent=2))
    else:
        styles = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}
        table = Table("check", "status", "finding / fix")
        for c in checks:
            table.add_row(c.name, f"[{styles[c.status]}]{c.status}[/]", c.message)
        Console().print(table)
        Console().print(f"[bold red]{len(failed)} blocking problem(s)[/]" if failed else "[green]ready to run[/]")
    return 1 if failed else 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from edge_rt.ops.replay import ReplayOptions, compare, replay_session
    from edge_rt.ops.session import Session

    session = Session.load(args.dir)
    traces = replay_session(session, ReplayOptions(pack=args.pack, precision=args.precision, speed=args.speed))
    result = compare(session.traces, [t.as_dict() for t in traces])
    if args.json:
        print(json.dumps(result.as_dict(), ensure_ascii=False, indent=2))
        return 0
    fmt = (lambda v: "–" if v is None else f"{v:.0f}")
    table = Table("time", "recorded", "replay", "same", "rec ms", "replay ms")
    for r in result.rows:
        rec, rep = r["recorded"] or {}, r["replay"] or {}
        table.add_row(f'{r["start_s"]:.1f}s', rec.get("text", "–"), rep.get("text", "–"),
                      "yes" if r["same_text"] else "[red]no[/]", fmt(rec.get("latency_ms")), fmt(rep.get("latency_ms")))
    console = Console()
    console.print(table)
    d = result.as_dict()["latency_ms"]
    console.print(f"transcripts {'identical' if result.same_transcripts else '[red]differ[/]'}; latency p50 "
                  f"recorded {fmt(d['recorded']['p50'])} ms, replay {fmt(d['replay']['p50'])} ms", highlight=False)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from edge_rt.ops.session_report import write_report

    out = write_report(args.dir, args.output)
    print(out)
    return 0


def _add_ops_commands(sub) -> None:
    s = sub.add_parser("serve", help="the systemd service: config file, READY/STATUS/WATCHDOG, restarts audio")
    s.add_argument("--config", default=None, help="TOML config (systemd/config.example.toml); flags override it")
    s.add_argument("--to", default=None, help="override translate.to")
    s.add_argument("--from", dest="source", default=None, help="override translate.from")
    s.add_argument("--pack", default=None, help="override pack.name")
    s.add_argument("--precision", choices=("fp32", "int8"), default=None, help="override pack.precision")
    s.add_argument("--device-in", default=None, help="override audio.device_in")
    s.add_argument("--device-out", default=None, help="override audio.device_out")
    s.add_argument("--record", default=None, help="override record.dir (one session folder per audio open)")
    s.set_defaults(func=_cmd_serve)

    dr = sub.add_parser("doctor", help="check this device: packages, GPU, pack integrity, audio devices, disk")
    dr.add_argument("--config", default=None, help="config to check (default /etc/edge-rt/config.toml if present)")
    dr.add_argument("--quick", action="store_true", help="skip hashing the pack's files")
    dr.add_argument("--json", action="store_true")
    dr.set_defaults(func=_cmd_doctor)

    rp = sub.add_parser("replay", help="re-run a recorded session's input at its pace and compare with the recording")
    rp.add_argument("dir", help="session folder (edge-rt run --record DIR)")
    rp.add_argument("--pack", default=None, help="pack to replay with (default: the recorded one)")
    rp.add_argument("--precision", choices=("fp32", "int8"), default=None)
    rp.add_argument("--speed", type=float, default=1.0, help="replay speed (latencies compare only at 1)")
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=_cmd_replay)

    rr = sub.add_parser("report", help="write a self-contained HTML report of a recorded session")
    rr.add_argument("dir", help="session folder")
    rr.add_argument("-o", "--output", default=None, help="HTML file (default DIR/report.html)")
    rr.set_defaults(func=_cmd_report)


def _cmd_eval(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from edge_rt.measure.eval import EvalOptions, evaluate

    precisions = tuple(args.precisions.split(","))
    for p in precisions:
        if p not in ("int8", "fp32"):
            raise EdgeRtError(f"--precisions takes int8 and/or fp32 separated by commas, not {p!r}")
    result = evaluate(EvalOptions(pack=args.pack, precisions=precisions, threads=args.threads,
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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="edge-rt", description="On-device live speech translation.")
    ap.add_argument("--version", action="version", version=f"edge-rt {__import__('edge_rt').__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("translate", help="translate the speech in an audio file into a WAV of translated speech")
    t.add_argument("input", help="audio file (any format/rate/channels libsndfile reads)")
    t.add_argument("--to", required=True, help="target language (en or pt with the default pack)")
    t.add_argument("--from", dest="source", default=None, help="source language (default: detect)")
    t.add_argument("-o", "--output", default=None, help="output WAV (default: <input>.<to>.wav)")
    t.add_argument("--json", action="store_true", help="print utterances and output path as JSON")
    _add_pack_args(t)
    t.set_defaults(func=_cmd_translate)

    r = sub.add_parser("run", help="live: translate the microphone into the headset")
    r.add_argument("--to", required=True, help="target language (en or pt with the default pack)")
    r.add_argument("--from", dest="source", default=None, help="source language (default: detect)")
    r.add_argument("--device-in", default=None, help="capture device: index or part of its name (edge-rt devices)")
    r.add_argument("--device-out", default=None, help="playback device: index or part of its name")
    r.add_argument("--rate-in", type=int, default=None, help="capture rate (default: the device's)")
    r.add_argument("--rate-out", type=int, default=None, help="playback rate (default: the device's)")
    r.add_argument("--backend", choices=("sounddevice", "pyaudio"), default="sounddevice")
    r.add_argument("--hangover-ms", type=int, default=288, help="silence that ends an utterance (default 288)")
    r.add_argument("--trace", default=None, help="append one JSON line per utterance to this file")
    r.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus /metrics on this port (0: off)")
    r.add_argument("--metrics-bind", default="127.0.0.1", help="address for /metrics (default 127.0.0.1)")
    r.add_argument("--record", default=None, help="field test: record the session into this new folder")
    r.add_argument("--latency-budget-ms", type=float, default=1500.0,
                   help="with --record: dump the flight recorder when an utterance is slower (default 1500)")
    _add_pack_args(r)
    r.set_defaults(func=_cmd_run)

    b = sub.add_parser("bench", help="turn latency of the live loop on the real speech set, vs a serial pipeline")
    b.add_argument("--clip", action="append", default=[], help="clip id from manifest.jsonl (repeatable)")
    b.add_argument("--limit", type=int, default=None, help="at most this many clips")
    b.add_argument("--speech-dir", default=None, help="folder with manifest.jsonl (default ../shared/data/speech)")
    b.add_argument("--no-baseline", action="store_true", help="skip the serial baseline")
    b.add_argument("--no-partials", action="store_true", help="no partial decodes (live captions) during speech")
    b.add_argument("--no-speculation", action="store_true", help="no decode/translate ahead at pauses")
    b.add_argument("--speculate-after-ms", type=int, default=None, metavar="MS",
                   help="pause after which the utterance so far is decoded, translated and its first clause "
                        "synthesized ahead (default: the loop's, 64)")
    b.add_argument("--early-commit", action="store_true",
                   help="end an utterance at a pause once its text is a complete sentence (faster, less accurate)")
    b.add_argument("--check", default=None, metavar="FILE",
                   help="perf-regression check: run FILE's clips, fail if live/serial P50 grew > its tolerance")
    b.add_argument("--record-check", default=None, metavar="FILE", help="write this run's ratio as a check file")
    b.add_argument("--json", action="store_true")
    b.add_argument("--plot", default=None, help="write a PNG: per-stage heat-map and latency distribution")
    b.add_argument("--soak", type=float, default=None, metavar="MINUTES",
                   help="soak instead: speech and silence at real time for MINUTES; RSS, lag, overruns as JSON")
    b.add_argument("--soak-warmup-s", type=float, default=None,
                   help="with --soak: seconds before RSS growth is measured (default: one pass over the clips)")
    _add_pack_args(b)
    b.set_defaults(func=_cmd_bench)

    e = sub.add_parser("eval", help="accuracy on the real speech set: WER/CER, chrF/BLEU, ASR-BLEU, INT8 vs FP32")
    e.add_argument("--clip", action="append", default=[], help="clip id from manifest.jsonl (repeatable)")
    e.add_argument("--limit", type=int, default=None)
    e.add_argument("--precisions", default="int8,fp32", help="comma-separated: int8,fp32 (default both)")
    e.add_argument("--no-spoken", action="store_true", help="skip transcribing the synthesized output back")
    e.add_argument("--json", action="store_true")
    _add_pack_args(e)
    e.set_defaults(func=_cmd_eval)

    d = sub.add_parser("devices", help="list audio devices")
    d.add_argument("--backend", choices=("sounddevice", "pyaudio"), default="sounddevice")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_cmd_devices)
    _add_ops_commands(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EdgeRtError as e:
        print(f"edge-rt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("edge-rt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
