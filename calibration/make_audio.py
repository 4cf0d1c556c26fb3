#!/usr/bin/env python3
"""The calibration recipe, runnable on its own: `python calibration/make_audio.py --pack tiny`.

Generates (or loads from the cache) the exact audio set `tools/build_engines.py` calibrates
with: speech from the built pack's Piper voice and espeak-ng voices reading
sentences_en.txt / sentences_pt.txt, mixed with generated noise, music-like sounds,
plosive bursts and silence (edge_rt/build/calibration/audio.py). No downloads; seeded; cached
under ~/.cache/edge_rt/calibration keyed by a hash of the recipe, the corpus and the voices.
`--wav DIR` writes a few samples of each kind for listening.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.build.calibration.inputs import CalibrationData  # noqa: E402
from edge_rt.build.packs import cache_dir  # noqa: E402
from edge_rt.build.calibration.stage_view import StageView  # noqa: E402
from edge_rt.errors import EdgeRtError  # noqa: E402
from edge_rt.pack import BuiltPack  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", default="tiny", help="a built pack whose voices speak the corpus (default: tiny)")
    ap.add_argument("--wav", type=Path, default=None, help="write 3 samples of each kind here")
    args = ap.parse_args(argv)
    try:
        pack = BuiltPack.load(args.pack)
        data = CalibrationData.prepare(StageView(pack.dir, pack.manifest["stages"]), cache_dir() / "calibration")
    except EdgeRtError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"calibration set {data.audio.key[:16]}: {len(data.audio)} samples {data.audio.counts()}")
    print(f"held-out set {data.held_out.key[:16]}: {len(data.held_out)} samples {data.held_out.counts()}")
    if args.wav:
        from edge_rt.audio.files import write_audio

        seen: dict[str, int] = {}
        for i, s in enumerate(data.audio):
            if seen.get(s.kind, 0) < 3:
                seen[s.kind] = seen.get(s.kind, 0) + 1
                write_audio(args.wav / f"{i:03d}_{s.kind}.wav", s.audio, 16000)
        print(f"wrote {sum(seen.values())} WAVs to {args.wav}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
