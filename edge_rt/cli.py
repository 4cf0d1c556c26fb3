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
    from edge_rt.pack import BuiltPack
    from edge_rt.translate import FileTranslator, TranslateOptions

    console = Console(stderr=True)
    audio = read_audio(args.input)  # fail on a bad file before loading any model
    out = Path(args.output) if args.output else Path(args.input).with_name(f"{Path(args.input).stem}.{args.to}.wav")
    pack = BuiltPack.load(args.pack)
    t0 = time.perf_counter()
    ft = FileTranslator(pack, TranslateOptions(target=args.to, source=args.source, precision=args.precision,
                                               threads=args.threads))
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    utts, track = ft.translate(audio)
    write_audio(out, track, ft.output_rate)
    run_s = time.perf_counter() - t1
    if args.json:
        print(json.dumps({"utterances": [u.as_dict() for u in utts], "output": str(out),
                          "sample_rate": ft.output_rate, "load_s": round(load_s, 3), "run_s": round(run_s, 3)},
                         ensure_ascii=False, indent=2))
    else:
        for u in utts:
            console.print(f"[dim]{u.start_s:6.2f}–{u.end_s:6.2f}s[/] [cyan]{u.lang}[/] {u.text}", highlight=False)
            console.print(f"{'':14} [green]{args.to}[/] {u.translation}", highlight=False)
        if not utts:
            console.print("[yellow]no speech found in the input[/]")
        console.print(f"wrote {out} ({len(track) / ft.output_rate:.1f} s) in {run_s:.1f} s "
                      f"(models loaded in {load_s:.1f} s)", highlight=False)
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
