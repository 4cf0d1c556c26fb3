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
    p.add_argument("--precision", choices=("fp32", "int8"), default="fp32",
                   help="engine precision (int8 falls back to fp32 where the pack has none)")
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
    from edge_rt.trace import TraceWriter

    console = Console(stderr=True)
    stages = Stages.load(BuiltPack.load(args.pack), StageOptions(precision=args.precision, threads=args.threads))
    source = DeviceSource(args.device_in, rate=args.rate_in, backend=args.backend)
    sink = DeviceSink(args.device_out, rate=args.rate_out, backend=args.backend)
    trace = TraceWriter(args.trace) if args.trace else None
    captions = Captions(Console())
    loop = Loop(stages, source, sink,
                LoopOptions(target=args.to, source=args.source,
                            endpoint=EndpointOptions(hangover_ms=args.hangover_ms)),
                on_caption=captions, trace=trace)

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
    if trace:
        trace.close()
    s = source.ring.stats
    console.print(f"stopped: {len(loop.traces)} utterances, capture overruns {s.overruns} "
                  f"({s.dropped} samples), playback underruns {sink.ring.stats.underruns}", highlight=False)
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
    _add_pack_args(r)
    r.set_defaults(func=_cmd_run)

    d = sub.add_parser("devices", help="list audio devices")
    d.add_argument("--backend", choices=("sounddevice", "pyaudio"), default="sounddevice")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_cmd_devices)
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
