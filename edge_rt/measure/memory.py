"""The loop's own memory and cold start, measured in a fresh process.

``edge-rt bench`` also loads the serial baseline and, with ``--peer``, faster-whisper: its
``ru_maxrss`` is theirs too (1.9-2.9 GB). :func:`measure_memory` starts a new Python process
(``python -m edge_rt.measure.memory``) that does only what ``edge-rt run`` does before it
listens, then translates the given clips through the loop, and reports:

- ``cold_start_s``: process start (the kernel's start time of the process, so the interpreter's own
  start-up counts) to *ready*: the modules ``edge-rt run`` imports are imported and the pipeline is
  loaded (``import_s`` + ``load_s``). ``edge-rt run`` does no warm-up pass before it listens.
- ``rss_loaded_mb``: resident set after the load; ``load_peak_mb`` the high-water mark so far
  (the model loader's transient buffers included).
- ``rss_warm_mb``: after one warm-up pass over the clips (each bucket used once: the ONNX Runtime
  arenas have grown to what these inputs need).
- ``peak_after_warmup_mb``: the high-water mark of a second pass over the same clips, the kernel's
  ``VmHWM`` reset after the warm-up (``/proc/self/clear_refs``): the figure the 8-GB target
  (``<= 600 MB``) is about. Each pass ends with the longest window the loop decodes (``joint_window``:
  a follow-up decoded together with the utterance before it, Whisper's 30-s window), which
  ``translate_audio`` alone never makes: without it the figure left out the loop's worst case.

Linux only (``/proc``); elsewhere the figures are ``None``.

Where the MB went, as first measured (default pack, INT8, CPU, 2 threads, x86; RSS after load / peak after
warm-up, MB; each stage alone in a fresh process, ~28 MB of it Python + numpy). Since 2026-12-03 the Whisper
decoder's INT8 twin quantizes its tied output projection too (59 MB after load, 134 MB before) and every
session draws from one shared arena (``SessionOptions.memory_arena``), so the encoder's long windows and
Piper's long sentences no longer each keep a high-water mark of their own: the loop's peak after warm-up
over bench's 7 memory clips went from 571 to 417 MB (beam 5: 629 to 529 MB).

- VAD 66/68.
- ASR 427/568: the Whisper base decoder is FP32 (the pack has no INT8 twin): 186 MB of weights plus a
  101 MB pre-packed copy of its tied embedding; ~135 MB of arena, mostly the encoder at the 30-s window.
- MT 272/274 before, 174/182 now (the tied embedding held once per pair, the loader's freed heap
  returned); 120/126 with only the pair into the target.
- TTS 138/336: Piper, ~200 MB of arena for a long sentence.
- The whole loop on 4 clips into pt: 674/809 before, 602/745 now, 439/553 with
  ``MtOptions(pairs=pairs_into(pack, "pt"))`` and the Whisper decoder unpacked (``ORT_TUNING`` in
  :mod:`edge_rt.backends.factory`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

__all__ = ["MemoryReport", "measure_memory"]

MB = 1 << 20


@dataclass(frozen=True)
class MemoryReport:
    """What one fresh process running the loop used (MB, seconds)."""

    pack: str
    precision: str
    threads: int
    target: str
    clips: int
    cold_start_s: float | None  # process start -> imports done and pipeline loaded (ready to listen)
    import_s: float  # this module's start -> the modules `edge-rt run` needs imported
    load_s: float  # Pipeline.load
    warmup_s: float  # the first pass over the clips
    rss_base_mb: float | None  # after the imports, before any model
    rss_loaded_mb: float | None
    load_peak_mb: float | None  # VmHWM after loading (loader transients included)
    rss_warm_mb: float | None  # after the warm-up pass
    peak_after_warmup_mb: float | None  # VmHWM during the second pass (reset after the warm-up)
    rss_end_mb: float | None
    beam_size: int = 1  # the loop's beam search (1: greedy)
    # The beam an unsure greedy decode is decoded again with (LoopOptions.redecode; 0: off). Clean clips rarely
    # take it, noise does: both passes decode every utterance once more with it, so its cache is in the peak.
    redecode_beam: int = 0
    # Each pass ends with the joint decode's window (ContextOptions.joint_max_s of the clips end to end), the
    # longest the loop decodes: Whisper's 30-s window, with the re-decode's beam when it is on.
    joint_window: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


def measure_memory(pack: str | Path, clips: Sequence[str | Path], *, precision: str = "int8", threads: int = 2,
                   target: str = "pt", beam_size: int = 1, redecode_beam: int = 5, joint_window: bool = True,
                   timeout_s: float = 900.0) -> MemoryReport:
    """Load ``pack`` on the CPU in a new process, translate ``clips`` into ``target`` twice, return its figures.

    Args:
        pack: a pack name under ``engines/`` or a folder.
        clips: audio files (any rate; read with :func:`edge_rt.audio.files.read_audio`), at least one.
        precision, threads: as ``edge-rt run --precision --threads``.
        target: the language spoken (``--to``).
        beam_size: the loop's beam search for the text it translates (``--beam``; its cache is part of the peak).
        redecode_beam: the beam an unsure greedy decode is decoded again with (``LoopOptions.redecode``; 0: off);
            with ``beam_size`` 1, each pass also decodes every utterance with it once (its memory is part of the peak).
        joint_window: each pass ends by decoding the clips end to end, repeated or cut to
            ``ContextOptions.joint_max_s`` (28 s), as the loop decodes a follow-up together with the
            utterance before it: Whisper's 30-s window, the largest encoder run (with the re-decode's beam
            when it is on).

    Raises:
        ValueError: no clips.
        RuntimeError: the child process failed; the message holds its stderr.
    """
    if not clips:
        raise ValueError("measure_memory needs at least one clip to warm up and measure the loop on")
    cmd = [sys.executable, "-m", "edge_rt.measure.memory", "--pack", str(pack), "--precision", precision,
           "--threads", str(threads), "--to", target, "--beam", str(beam_size),
           "--redecode-beam", str(redecode_beam if beam_size == 1 else 0),
           *(() if joint_window else ("--no-joint-window",)), *(str(c) for c in clips)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"the memory measurement process failed (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-2000:]}")
    return MemoryReport(**json.loads(proc.stdout.strip().splitlines()[-1]))


def _status() -> dict[str, float]:
    """VmRSS and VmHWM of this process, MB; {} where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            return {k: int(v.split()[0]) / 1024 for k, v in (line.split(":", 1) for line in f)
                    if k in ("VmRSS", "VmHWM")}
    except OSError:
        return {}


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def cold_start_s() -> float:
    """Seconds since the kernel started this process (for 'process start → ready to listen')."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def _child(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    # What `edge-rt run` imports before it loads the pack (edge_rt/cli/speech.py), so import_s is its cost.
    import edge_rt.cli  # noqa: F401
    import rich.console  # noqa: F401

    import numpy as np

    from edge_rt.audio.files import read_audio
    from edge_rt.loop.captions import Captions  # noqa: F401
    from edge_rt.loop.context import ContextOptions
    from edge_rt.loop.loop import LoopOptions  # noqa: F401
    from edge_rt.pipeline import Pipeline, StageOptions
    from edge_rt.loop.redecode import RedecodeOptions
    from edge_rt.translate import TranslateOptions, translate_audio
    from edge_rt.units import SAMPLE_RATE

    t1 = time.perf_counter()
    base = _status()
    pipe = Pipeline.load(args.pack, StageOptions(precision=args.precision, threads=args.threads, backend="cpu",
                                                 target=args.to))  # as `edge-rt run --to TARGET` loads
    t2 = time.perf_counter()
    try:
        age = cold_start_s()
    except (OSError, ValueError, IndexError):  # no /proc: the figure is left out
        age = None
    loaded = _status()
    audio = [read_audio(c) for c in args.clips]
    opts = TranslateOptions(target=args.to, beam_size=args.beam,
                            redecode=RedecodeOptions(beam_size=args.redecode_beam) if args.redecode_beam else None)
    asr = pipe.stages.asr
    redecode = asr.with_options(replace(asr.options, beam_size=args.redecode_beam)) if args.redecode_beam else None

    # The longest window the loop decodes: a follow-up utterance decoded together with the one before it
    # (ContextOptions.joint_max_s, Whisper's 30-s window), the clips end to end (repeated to fill it); as an unsure
    # joint decode is decoded, with the re-decode's beam when it is on. translate_audio never makes one.
    joint = None
    if args.joint_window:
        joint = np.resize(np.concatenate(audio), int(ContextOptions().joint_max_s * SAMPLE_RATE))

    def translate_all():
        for a in audio:
            utterances, _, _ = translate_audio(pipe.stages, a, opts)
            for u in utterances if redecode is not None else ():  # each as an unsure decode would be, whatever
                redecode.transcribe(a[int(u.start_s * SAMPLE_RATE): int(u.end_s * SAMPLE_RATE)])  # its log-prob
        if joint is not None:
            (redecode or asr).transcribe(joint)

    t3 = time.perf_counter()
    translate_all()
    t4 = time.perf_counter()
    warm = _status()
    peak = None
    if _reset_peak():
        translate_all()
        peak = _status().get("VmHWM")
    end = _status()
    return dict(pack=pipe.pack.name, precision=args.precision, threads=args.threads, target=args.to,
                clips=len(audio), cold_start_s=None if age is None else round(age, 3),
                import_s=round(t1 - t0, 3), load_s=round(t2 - t1, 3), warmup_s=round(t4 - t3, 3),
                rss_base_mb=base.get("VmRSS"), rss_loaded_mb=loaded.get("VmRSS"), load_peak_mb=loaded.get("VmHWM"),
                rss_warm_mb=warm.get("VmRSS"), peak_after_warmup_mb=peak, rss_end_mb=end.get("VmRSS"),
                beam_size=args.beam, redecode_beam=args.redecode_beam, joint_window=args.joint_window)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m edge_rt.measure.memory",
                                description="the loop's own RSS and cold start, in this fresh process (JSON)")
    p.add_argument("--pack", default="default")
    p.add_argument("--precision", choices=("fp32", "int8"), default="int8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--to", default="pt")
    p.add_argument("--beam", type=int, default=1, help="beam search of N hypotheses (default 1, greedy)")
    p.add_argument("--redecode-beam", type=int, default=5,
                   help="the beam an unsure greedy decode is decoded again with (LoopOptions.redecode; 0: off)")
    p.add_argument("--no-joint-window", dest="joint_window", action="store_false",
                   help="leave out the joint decode's 30-s window (the clips end to end, ContextOptions.joint_max_s)")
    p.add_argument("clips", nargs="+")
    print(json.dumps(_child(p.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
