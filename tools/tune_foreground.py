#!/usr/bin/env python3
"""Choose ForegroundOptions on generated audio (not the evaluation clips): talkers in babble, and babble alone.

An utterance that gave no words is decoded again from where its loudest talker starts (edge_rt/loop/foreground.py).
This tool builds items from the calibration recipe's voices and sentences (calibration/sentences_*.txt, the
calibration split: neither the real clips nor the gate's held-out sentences), as tools/tune_unsure.py does:

* **talker in babble**: 1-3 s of babble (4 synthesized talkers, -20 dB each relative), then one English sentence
  at -26 dBFS over it at 5 or 10 dB SNR, then 1 s more babble: the VAD opens on the babble, as in a hall;
* **babble alone**: 8 s of 4-6 talkers at -45..-30 dBFS: any text is invented.

Each item goes through the noisy eval's loop (``edge-rt translate --to en``'s, the unsure gate on) once per
setting; per setting it prints the empty talker items, their WER and the babble items with text.

    python tools/tune_foreground.py --items 16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_unsure import _at, talkers_and_stages  # noqa: E402  (the same generated talkers)

from edge_rt.audio.files import resample  # noqa: E402
from edge_rt.loop.foreground import ForegroundOptions  # noqa: E402
from edge_rt.loop.loop import LoopOptions  # noqa: E402
from edge_rt.measure.noise import mix_at_snr  # noqa: E402
from edge_rt.measure.noise_eval import run_loop  # noqa: E402
from edge_rt.measure.scoring import wer  # noqa: E402
from edge_rt.units import SAMPLE_RATE as SR  # noqa: E402

SETTINGS = {"off": None, **{f"drop {d:g} dB": ForegroundOptions(drop_db=d) for d in (3.0, 4.0, 5.0, 6.0)}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=16, help="talker items and as many babble-alone items")
    p.add_argument("--pack", default="default")
    p.add_argument("--seed", type=int, default=23)
    args = p.parse_args(argv)
    talkers, stages = talkers_and_stages(args.pack, args.seed)
    rng = talkers.rng
    items = []
    for i in range(args.items):
        sentence_idx = int(rng.integers(len(talkers.sentences["en"])))
        voice_idx = int(rng.integers(len(talkers.voices["en"])))
        audio, rate = talkers.voices["en"][voice_idx].speak(talkers.sentences["en"][sentence_idx])
        speech = _at(resample(np.asarray(audio, np.float32), rate), -26)
        lead = int(rng.uniform(1.0, 3.0) * SR)
        clean = np.concatenate([np.zeros(lead, np.float32), speech, np.zeros(SR, np.float32)])
        snr = (5.0, 10.0)[i % 2]
        mixed, _ = mix_at_snr(clean, np.asarray(talkers.babble(4, len(clean), False), np.float64), snr)
        items.append(("talker", f"{lead / SR:.1f} s lead, {snr:g} dB", mixed.astype(np.float32),
                      talkers.sentences["en"][sentence_idx]))
        level = rng.uniform(-45, -30)
        count = int(rng.integers(4, 7))
        items.append(("babble", f"{count} talkers, {level:.0f} dBFS", _at(talkers.babble(count, 8 * SR, False), level), ""))
    summary = {}
    for name, fg in SETTINGS.items():
        options = dataclasses.replace(LoopOptions(target="en", partials=False), foreground=fg)
        refs, hyps, empty, invented = [], [], 0, 0
        for kind, what, audio, ref in items:
            traces, _ = run_loop(stages, audio, options)
            said = " ".join(t.text or t.translation for t in traces if (t.text or t.translation)).strip()
            if kind == "talker":
                refs.append(ref)
                hyps.append(said)
                empty += not said
            else:
                invented += bool(said)
            print(json.dumps({"setting": name, "kind": kind, "item": what, "said": said}, ensure_ascii=False), flush=True)
        summary[name] = {"talker_items_empty": empty, "talker_wer": round(100 * wer(refs, hyps), 1),
                         "babble_items_with_text": invented, "items": len(items) // 2}
    print(json.dumps(summary, indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
