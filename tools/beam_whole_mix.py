"""Greedy against beam search on whole noisy mixes, without the loop (README, Noise: "Beam search").

Each English clip of the speech set, clean and mixed as `edge-rt eval --noise` mixes it (same seed), is
decoded whole by the pack's Whisper engines (language given) greedily and with a beam; with ``--peer``
also by faster-whisper on the same weights (int8, no VAD filter, no timestamps) with beam 1 and 5, which
tells the beam's share of a gap from the VAD filter's.

    python tools/beam_whole_mix.py --kinds pink,brown,music,babble --snr 5,10 [--beam 5] [--peer]
"""

from __future__ import annotations

import argparse
import time

from edge_rt.measure.noise import NoiseOptions, noisy_mixes
from edge_rt.measure.noise_eval import NoiseEvalOptions, noise_clips
from edge_rt.measure.scoring import wer
from edge_rt.pack import BuiltPack
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.stages.asr.whisper import AsrOptions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="pink")
    ap.add_argument("--snr", default="5")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--peer", action="store_true", help="also faster-whisper, beam 1 and beam --beam")
    args = ap.parse_args()
    options = NoiseEvalOptions()
    clips, pool = noise_clips(options)
    clips = [c for c in clips if c["lang"] == "en"]
    pack = BuiltPack.load(options.pack)
    stages = load_stages(pack, StageOptions(precision=args.precision))
    greedy = stages.asr
    beam = greedy.with_options(AsrOptions(precision=greedy.options.precision, threads=greedy.options.threads,
                                          beam_size=args.beam))
    fw = None
    if args.peer:
        from edge_rt.measure.peer import PeerStack

        fw = PeerStack.load(pack, stages)._whisper
    noise = NoiseOptions(kinds=tuple(args.kinds.split(",")), snrs_db=tuple(float(x) for x in args.snr.split(",")))
    by_id = {c["id"]: c for c in clips}
    rows: dict[str, dict] = {}

    def decode(key: str, clip: dict, audio) -> None:
        row = rows.setdefault(key, {"ref": [], "greedy": [], "beam": [], "s_greedy": 0.0, "s_beam": 0.0,
                                    "fw_greedy": [], "fw_beam": []})
        row["ref"].append(clip["text"])
        for name, asr in (("greedy", greedy), ("beam", beam)):
            t0 = time.perf_counter()
            row[name].append(asr.transcribe(audio, language="en").text)
            row[f"s_{name}"] += time.perf_counter() - t0
        if fw is not None:
            for name, size in (("fw_greedy", 1), ("fw_beam", args.beam)):
                segments, _ = fw.transcribe(audio, language="en", beam_size=size, temperature=0.0,
                                            without_timestamps=True, condition_on_previous_text=False)
                row[name].append(" ".join(s.text.strip() for s in segments))

    for c in clips:
        decode("clean", c, pool[c["id"]])
    for m in noisy_mixes({c["id"]: pool[c["id"]] for c in clips}, pool, noise):
        decode(f"{m.kind}/{m.snr_db:g} dB", by_id[m.clip_id], m.audio)
    for key, row in rows.items():
        scores = {k: f"{100 * wer(row['ref'], row[k]):.1f} %" for k in ("greedy", "beam", "fw_greedy", "fw_beam")
                  if row[k]}
        print(f"{key:14} WER {scores}  decode {row['s_greedy']:.1f} s greedy, {row['s_beam']:.1f} s beam")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
