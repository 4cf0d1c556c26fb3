"""Where the unsure gate's log-probability limit can sit, on generated audio (not the evaluation clips).

The gate (``LoopOptions.unsure``) drops an utterance that does not follow speech when Whisper's
P(no speech) is above the first value and its average log-probability below the second. This tool
builds two kinds of 8-s item from the calibration recipe's voices and sentences (calibration/
sentences_*.txt, the calibration split: neither the real clips nor the held-out gate sentences):

* **babble alone**: 4-10 synthesized talkers (English, and with ``--mixed`` Portuguese too), each at
  -20 dB relative, the sum at -45..-30 dBFS: any text is invented;
* **speech in noise**: one synthesized English sentence at -26 dBFS in babble, pink, brown or
  music-like noise at 5/10 dB (``--mixed``: 0/5 dB): text is wanted.

Each item goes through the noisy eval's loop (``edge-rt translate --to en``'s), with the gate off, and every
Whisper result is printed (JSON lines) with the interval of limits that decide every item alike:
above the highest log-probability of invented text that P(no speech) lets through, below the lowest
of wanted text that it would catch.

    python tools/tune_unsure.py --items 16 > a.jsonl
    python tools/tune_unsure.py --items 16 --mixed > b.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from edge_rt.audio.files import resample
from edge_rt.build.calibration.corpus import load_corpus
from edge_rt.build.calibration.inputs import pack_voices
from edge_rt.build.calibration.stage_view import StageView
from edge_rt.loop.loop import LoopOptions
from edge_rt.measure.noise import make_noise, mix_at_snr
from edge_rt.measure.noise_eval import run_loop
from edge_rt.pack import BuiltPack
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.units import SAMPLE_RATE as SR

ITEM_S = 8.0


def _at(x: np.ndarray, dbfs: float) -> np.ndarray:
    return (x * (10 ** (dbfs / 20) / (np.sqrt(np.mean(x ** 2)) + 1e-12))).astype(np.float32)


def talkers_and_stages(pack_name: str, seed: int, precision: str = "int8"):
    """The generated talkers of pack ``pack_name`` drawing from a generator seeded ``seed`` (``talkers.rng``), and
    the pack's stages: what every tuning tool starts with."""
    pack = BuiltPack.load(pack_name)
    talkers = _Talkers(pack, np.random.default_rng(seed))
    return talkers, load_stages(pack, StageOptions(precision=precision))


class _Talkers:
    """Synthesized sentences of the recipe's voices, cached."""

    def __init__(self, pack: BuiltPack, rng: np.random.Generator):
        voices = pack_voices(StageView(pack.dir, pack.manifest["stages"], 2))
        self.voices = {lang: [v for v in voices if v.lang == lang] for lang in ("en", "pt")}
        self.sentences = {lang: load_corpus(lang).calibration for lang in ("en", "pt")}
        self.rng, self._cache = rng, {}

    def say(self, lang: str) -> np.ndarray:
        voice = int(self.rng.integers(len(self.voices[lang])))
        return self.speak(lang, voice, int(self.rng.integers(len(self.sentences[lang]))))

    def speak(self, lang: str, voice: int, sentence: int) -> np.ndarray:
        """Sentence ``sentence`` read by voice ``voice`` (indices into ``sentences[lang]``, ``voices[lang]``), 16 kHz."""
        key = (lang, voice, sentence)
        if key not in self._cache:
            audio, rate = self.voices[lang][voice].speak(self.sentences[lang][sentence])
            self._cache[key] = resample(np.asarray(audio, np.float32), rate)
        return self._cache[key]

    def babble(self, talkers: int, n: int, mixed: bool) -> np.ndarray:
        out = np.zeros(n, np.float32)
        for _ in range(talkers):
            lang = "pt" if mixed and self.rng.integers(2) else "en"
            x = np.concatenate([self.say(lang) for _ in range(3)])
            off = int(self.rng.integers(0, max(1, len(x) - n)))
            seg = x[off: off + n]
            out += _at(np.pad(seg, (0, n - len(seg))), -20)
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=16, help="pairs of (babble alone, speech in noise)")
    p.add_argument("--mixed", action="store_true", help="Portuguese talkers in the babble too; SNR 0/5 dB")
    p.add_argument("--pack", default="default")
    p.add_argument("--precision", choices=("int8", "fp32"), default="int8",
                   help="the engines decoded with (default int8, what the loop runs; this tool used FP32 until "
                        "2026-12-03)")
    p.add_argument("--no-speech", type=float, default=LoopOptions(target="en").unsure[0], help="the gate's P(no speech) value")
    args = p.parse_args(argv)

    talkers, stages = talkers_and_stages(args.pack, 11 if args.mixed else 7, args.precision)
    rng = talkers.rng
    options = LoopOptions(target="en", source=None, partials=False, unsure=None)  # edge-rt translate's, gate off
    results: list[dict] = []

    def listen(kind: str, audio: np.ndarray) -> None:
        _, drops = run_loop(stages, audio, options)  # the noisy eval's loop; drops.asr kept every result
        results.append({"kind": kind, "whisper": [
            {"text": r.text, "no_speech_prob": round(r.no_speech_prob, 3), "avg_logprob": round(r.avg_logprob, 3),
             "lang": r.language} for r in drops.asr.results]})
        print(json.dumps(results[-1], ensure_ascii=False), flush=True)

    n = int(ITEM_S * SR)
    for i in range(args.items):
        level = rng.uniform(-45, -30) if args.mixed else rng.uniform(-45, -35)
        count = int(rng.integers(6, 11) if args.mixed else rng.integers(4, 7))
        listen(f"babble alone, {count} talkers, {level:.0f} dBFS", _at(talkers.babble(count, n, args.mixed), level))
        clean = np.concatenate([np.zeros(SR, np.float32), _at(talkers.say("en"), -26), np.zeros(SR, np.float32)])
        kind = ("babble", "pink", "brown", "music")[i % 4]
        snr = ((0.0, 5.0) if args.mixed else (5.0, 10.0))[(i // 4) % 2]
        noise = (talkers.babble(6 if args.mixed else 4, len(clean), args.mixed) if kind == "babble"
                 else make_noise(kind, rng, len(clean)))
        mixed, _ = mix_at_snr(clean, np.asarray(noise, np.float64), snr)
        listen(f"speech in {kind} at {snr:g} dB", mixed.astype(np.float32))

    invented = [w["avg_logprob"] for r in results if r["kind"].startswith("babble") for w in r["whisper"]
                if w["text"].strip() and w["no_speech_prob"] > args.no_speech]
    wanted = [w["avg_logprob"] for r in results if r["kind"].startswith("speech") for w in r["whisper"]
              if w["text"].strip() and w["no_speech_prob"] > args.no_speech and w["lang"] == "en"]
    print(json.dumps({"invented_logprobs": sorted(invented), "wanted_logprobs": sorted(wanted)}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
