#!/usr/bin/env python3
"""Choose the automatic gain's noise rule (GainOptions.min_snr_db, steady_*) on generated audio, not the eval clips.

The gain (edge_rt/stages/gain.py) raises a quiet utterance to speech level before Whisper, unless its frame levels
do not vary as speech does: its loud 20-ms frames stand less than ``min_snr_db`` above its quiet ones, or, when its
quietest frames are steady noise (within ``steady_floor_db`` of each other), less than ``steady_min_snr_db``. Then
the utterance is taken for noise and left quiet, so Whisper's no-speech rule still sees noise. Quiet speech in
steady noise at 5 dB SNR stands only ~10 dB above its quiet frames, so with a 12 dB limit alone it was left at its
recorded level (the FLEURS clips: -53 to -59 dBFS loud frames) and Whisper called it no speech (README, Noise);
babble stands as little above its quiet frames, but has no steady floor. This tool builds,
from the calibration recipe's voices and calibration sentences (neither the real clips nor the gate's held-out
sentences):

* **speech in steady noise**: one English sentence in pink or brown noise at -5/0/5/10 dB, the mix at -60..-40
  dBFS loud level (a far or quiet microphone), 1 s of noise before and after: its words are wanted;
* **steady noise alone**: 8 s of pink, brown or music-like noise at -60..-30 dBFS: any text is invented;
* **babble alone**: 8 s of 4-10 talkers at -60..-30 dBFS: any text is invented (the unsure gate's case).

Every item goes through the noisy eval's loop (``edge-rt translate --to en``'s: the unsure gate on) once per
candidate rule; per rule it prints (stderr) the speech items that came back empty, their WER, and the
noise-alone items with text; and each utterance's (contrast, floor spread) in dB, by kind (what the rule separates).

    python tools/tune_gain.py --items 36 [--seed 43] [--candidates 12,7,12/7/3,12/7/4]
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

from edge_rt.loop.loop import LoopOptions  # noqa: E402
from edge_rt.measure.noise import make_noise, mix_at_snr  # noqa: E402
from edge_rt.measure.noise_eval import run_loop  # noqa: E402
from edge_rt.measure.scoring import wer  # noqa: E402
from edge_rt.stages.gain import GainOptions, contrast_db, floor_spread_db, frame_rms  # noqa: E402
from edge_rt.units import SAMPLE_RATE as SR  # noqa: E402

CANDIDATES = "12,7,12/7/3,12/7/4"


def candidate(spec: str) -> GainOptions:
    """``"12"``: min_snr_db 12, no steady-floor exception; ``"12/7/3"``: min_snr_db / steady_min_snr_db /
    steady_floor_db."""
    parts = [float(x) for x in spec.split("/")]
    if len(parts) == 1:
        return GainOptions(min_snr_db=parts[0], steady_min_snr_db=None)
    return GainOptions(min_snr_db=parts[0], steady_min_snr_db=parts[1], steady_floor_db=parts[2])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=24, help="speech items, and half as many of each alone kind")
    p.add_argument("--pack", default="default")
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("--candidates", default=CANDIDATES,
                   help="comma-separated gain rules: MIN (min_snr_db alone) or MIN/STEADY/FLOOR (with the steady-floor "
                        "exception); the first also gives the utterances' contrasts and floor spreads")
    args = p.parse_args(argv)
    talkers, stages = talkers_and_stages(args.pack, args.seed)
    rng = talkers.rng
    items = []  # (kind, audio, reference or "")
    for i in range(args.items):
        voice = int(rng.integers(len(talkers.voices["en"])))
        at = int(rng.integers(len(talkers.sentences["en"])))
        sentence, speech = talkers.sentences["en"][at], talkers.speak("en", voice, at)
        clean = np.concatenate([np.zeros(SR, np.float32), _at(speech, -26), np.zeros(SR, np.float32)])
        kind, snr = ("pink", "brown")[i % 2], (-5.0, 0.0, 5.0, 10.0)[(i // 2) % 4]
        mixed, _ = mix_at_snr(clean, np.asarray(make_noise(kind, rng, len(clean)), np.float64), snr)
        loud = np.percentile(frame_rms(mixed.astype(np.float32)), 90)
        level = rng.uniform(-60, -40)
        items.append((f"speech in {kind} at {snr:g} dB", (mixed * (10 ** (level / 20) / loud)).astype(np.float32),
                      sentence))
        if i % 2 == 0:
            n = 8 * SR
            steady = ("pink", "brown", "music")[(i // 2) % 3]
            items.append((f"{steady} alone", _at(np.asarray(make_noise(steady, rng, n), np.float32),
                                                 rng.uniform(-60, -30)), ""))
            count = int(rng.integers(4, 11))
            items.append(("babble alone", _at(talkers.babble(count, n, bool(rng.integers(2))),
                                              rng.uniform(-60, -30)), ""))
    contrasts: dict[str, list[float]] = {}
    summary = {}
    specs = args.candidates.split(",")
    for spec in specs:
        options = dataclasses.replace(LoopOptions(target="en", partials=False), gain=candidate(spec))
        refs, hyps, empty, invented = [], [], 0, []
        for kind, audio, ref in items:
            traces, _ = run_loop(stages, audio, options)
            said = " ".join(t.text or t.translation for t in traces if (t.text or t.translation)).strip()
            if spec == specs[0]:
                for t in traces:
                    rms = frame_rms(audio[t.start_sample:t.end_sample])
                    if len(rms):
                        contrasts.setdefault(kind.split(" at ")[0], []).append(
                            (round(contrast_db(rms), 1), round(floor_spread_db(rms), 1)))
            if ref:
                refs.append(ref)
                hyps.append(said)
                empty += not said
            elif said:
                invented.append(f"{kind}: {said}")
            print(json.dumps({"gain": spec, "kind": kind, "said": said, "ref": ref}, ensure_ascii=False),
                  flush=True)
        summary[f"gain {spec}"] = {"speech_items_empty": empty, "speech_wer": round(100 * wer(refs, hyps), 1),
                                   "noise_alone_with_text": invented, "speech_items": len(refs)}
    summary["utterance_contrast_and_floor_db"] = {k: sorted(v) for k, v in contrasts.items()}
    print(json.dumps(summary, indent=1, ensure_ascii=False), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
