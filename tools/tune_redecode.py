#!/usr/bin/env python3
"""Choose when an unsure greedy decode is decoded again with a beam (LoopOptions.redecode), on generated audio.

The loop decodes greedily (a beam costs ~1.5x a decode on every turn). faster-whisper decodes with a beam of 5
and, when its average log-probability is below -1.0, again at higher temperatures. In steady noise the loop was
behind faster-whisper (README, Noise) and a beam always closed most of that gap for x1.10 turn latency on clean
speech. A beam only where greedy is unsure would take the gain where it is and leave confident speech alone.
This tool builds, from the calibration recipe's voices and calibration sentences (neither the real clips nor the
gate's held-out sentences), one English sentence at -26 dBFS with 1 s before and after, clean or in pink, brown,
music-like noise or 4-talker babble at 0/5/10 dB, and 8-s babble-alone items (any text is invented); every item
goes through the noisy eval's loop (``edge-rt translate --to en``'s) once per candidate and prints (stderr), per
candidate: WER over the speech items (and clean apart), items empty, decodes redone with the beam, Whisper's
total decode time, and the babble-alone items with text.

    python tools/tune_redecode.py --items 40 [--seed 53] [--hesitate 0.8] [--candidates off,-0.3,-0.5,-0.7,beam]
                                  [--room [--soft-onset 0.3]]

``--room`` puts every sentence over a room's floor (pink noise, -66 to -50 dBFS) instead of the noise conditions and
digital silence; ``--soft-onset S`` fades each sentence's first S seconds in from -30 dB (a softly said first word).

A limit may carry the rules for taking the beam's words (RedecodeOptions): ``-0.5:3:0.5`` is LIMIT:REPEAT_WORDS:MIN_KEPT
(``--candidates=-0.5:3:0,-0.5:3:0.5``: the ``=`` keeps argparse from reading the leading minus as an option),
and ``+splitLIMIT[:PIECES[:MIN_GAIN[:EMPTY]]]`` (EMPTY 1 or 0) after any candidate turns LoopOptions.split on (SplitOptions), e.g.
``--candidates=-0.5:3:0.5,-0.5:3:0.5+split1.2``; without it the split is off. ``+FIELD=VALUE`` (after the rest) sets any
other number of the loop's options, a dotted path into LoopOptions, e.g. ``+endpoint.preroll_ms=400`` (through a field
that is None, its options with their defaults: ``+noisy_preroll.below_db=20``; ``none`` sets None:
``+context.lend_within_s=none``). ``default`` is the loop as shipped (its redecode and split on): ``default+endpoint.postroll_ms=64``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
import typing
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune_unsure import _at, talkers_and_stages  # noqa: E402  (the same generated talkers)

from edge_rt.loop.options import LoopOptions, RedecodeOptions, SplitOptions  # noqa: E402
from edge_rt.measure.noise import make_noise, mix_at_snr  # noqa: E402
from edge_rt.measure.noise_eval import run_loop  # noqa: E402
from edge_rt.measure.paused import insert_pauses  # noqa: E402
from edge_rt.measure.scoring import wer  # noqa: E402
from edge_rt.stages.gain import frame_rms  # noqa: E402
from edge_rt.units import SAMPLE_RATE as SR  # noqa: E402

CANDIDATES = "off,-0.3,-0.5,-0.7,beam"
CONDITIONS = (("clean", None), ("pink", 5.0), ("brown", 5.0), ("music", 5.0), ("babble", 5.0),
              ("pink", 10.0), ("brown", 10.0), ("music", 10.0), ("babble", 10.0), ("pink", 0.0), ("brown", 0.0))


class _TimedAsr:
    """The pack's ASR, timing every decode and counting those made with a beam."""

    def __init__(self, asr, counts: dict):
        self._asr, self.counts = asr, counts

    def transcribe(self, audio, **kw):
        t0 = time.perf_counter()
        try:
            return self._asr.transcribe(audio, **kw)
        finally:
            self.counts["ms"] += (time.perf_counter() - t0) * 1000
            self.counts["decodes"] += 1
            self.counts["beam"] += self._asr.options.beam_size > 1

    def with_options(self, options):
        return _TimedAsr(self._asr.with_options(options), self.counts)

    def __getattr__(self, name):
        return getattr(self._asr, name)


def _set(options, path: str, value: str):
    """``options`` with the number at dotted ``path`` (``endpoint.preroll_ms``) set to ``value``, typed as the old one.
    A path through a field that is None (``noisy_preroll.extra_ms``) turns it on with its defaults first."""
    head, _, rest = path.partition(".")
    old = getattr(options, head)
    if old is None and rest:
        kinds = typing.get_args(typing.get_type_hints(type(options))[head])
        old = next(k for k in kinds if dataclasses.is_dataclass(k))()
    if not rest and value == "none":
        new = None  # +context.lend_within_s=none: a field whose None turns its feature off
    else:
        new = _set(old, rest, value) if rest else type(old)(float(value) if isinstance(old, float) else int(value))
    return dataclasses.replace(options, **{head: new})


def loop_options(spec: str) -> LoopOptions:
    full = spec
    spec, *sets = spec.split("+")  # ...+FIELD=VALUE: any other number of LoopOptions too
    if unknown := [s for s in sets if not s.startswith("split") and "=" not in s]:
        raise SystemExit(f"candidate {full!r}: +{unknown[0]} is neither +splitLIMIT... nor +FIELD=VALUE")
    split = next((s[len("split"):] for s in sets if s.startswith("split")), "")
    sets = [s for s in sets if "=" in s]
    options = _loop_options(spec, split)
    for s in sets:
        path, _, value = s.partition("=")
        options = _set(options, path, value)
    return options


def _loop_options(spec: str, split: str) -> LoopOptions:
    # split: LIMIT[:PIECES[:MIN_GAIN[:EMPTY]]] from ...+splitLIMIT..., LoopOptions.split; "": off
    if spec == "default":  # the loop's defaults (redecode and split as shipped), e.g. default+endpoint.postroll_ms=64
        if split:
            raise SystemExit("candidate 'default' takes the default split; +split... goes with a limit or 'off'")
        return LoopOptions(target="en", partials=False)
    base = LoopOptions(target="en", partials=False, redecode=None, split=None)
    if split:
        keys, types = ("below_tokens_per_s", "pieces", "min_gain", "empty"), (float, int, float, lambda v: v == "1")
        base = dataclasses.replace(base, split=SplitOptions(**{k: t(v) for k, t, v in zip(keys, types,
                                                                                           split.split(":"))}))
    if spec == "off":
        return base
    if spec == "beam":
        return dataclasses.replace(base, beam_size=5)
    limit, *rules = spec.split(":")  # LIMIT[:REPEAT_WORDS[:MIN_KEPT]]
    keys = ("repeat_words", "min_kept")
    kw = {k: t(v) for k, t, v in zip(keys, (int, float), rules)}
    return dataclasses.replace(base, redecode=RedecodeOptions(below_logprob=float(limit), **kw))


def hesitate(speech: np.ndarray, seconds: float) -> np.ndarray:
    """``speech`` with ``seconds`` of silence at its quietest 20 ms frame in the middle third (no draw from the
    seed's generator: the same sentences and voices as without)."""
    frame = SR // 50
    level = frame_rms(speech, frame)
    n = len(level)
    at = (n // 3 + int(np.argmin(level[n // 3: 2 * n // 3]))) * frame + frame // 2
    return insert_pauses(speech, [at], [np.zeros(int(seconds * SR), np.float32)])[0]


def soft_onset(speech: np.ndarray, seconds: float) -> np.ndarray:
    """``speech`` with its first ``seconds`` of sound (from its first 20-ms frame within 40 dB of its loudest) faded
    in from -30 dB, linearly in dB: a first word said softly."""
    level = frame_rms(speech)
    loud = np.flatnonzero(level > level.max() * 0.01)
    at = int(loud[0]) * (SR // 50) if len(loud) else 0
    n = min(int(seconds * SR), len(speech) - at)
    out = speech.copy()
    out[at: at + n] *= (10 ** (np.linspace(-30.0, 0.0, n) / 20)).astype(np.float32)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=40, help="speech items (and one babble-alone item per 8)")
    p.add_argument("--pack", default="default")
    p.add_argument("--seed", type=int, default=53)
    p.add_argument("--hesitate", type=float, default=0.0, metavar="S",
                   help="insert S seconds of silence into every sentence at its quietest 20 ms in the middle third "
                        "(a speaker searching for a word; the noise runs through it); 0: none")
    p.add_argument("--room", action="store_true",
                   help="every item clean speech over a room's floor (pink noise at -66 to -50 dBFS, drawn from a "
                        "generator of its own) instead of the noise conditions and digital silence")
    p.add_argument("--soft-onset", type=float, default=0.0, metavar="S",
                   help="the sentence's first S seconds of sound faded in from -30 dB (a soft first word, which the "
                        "VAD scores low and opens late on); 0: as spoken")
    p.add_argument("--candidates", default=CANDIDATES,
                   help="comma-separated: off (greedy), beam (a beam of 5 always), or a log-probability limit "
                        "[:repeat_words[:min_kept]]")
    args = p.parse_args(argv)
    talkers, stages = talkers_and_stages(args.pack, args.seed)
    rng = talkers.rng
    # --room's floors from a generator of their own; the noise conditions' draws are skipped with --room, so its
    # sentences and voices after the first differ from the same seed's without it
    room_rng = np.random.default_rng(args.seed + 1)
    items = []  # (condition, audio, reference or "")
    for i in range(args.items):
        at = int(rng.integers(len(talkers.sentences["en"])))  # drawn before the voice: --seed 53/59 as tuned
        voice = int(rng.integers(len(talkers.voices["en"])))
        sentence, speech = talkers.sentences["en"][at], talkers.speak("en", voice, at)
        if args.hesitate > 0:
            speech = hesitate(speech, args.hesitate)
        if args.soft_onset > 0:
            speech = soft_onset(speech, args.soft_onset)
        clean = np.concatenate([np.zeros(SR, np.float32), _at(speech, -26), np.zeros(SR, np.float32)])
        kind, snr = CONDITIONS[i % len(CONDITIONS)]
        if args.room:  # a room's floor under and around the speech: Silero after room tone, not digital silence
            floor = _at(make_noise("pink", room_rng, len(clean)), room_rng.uniform(-66, -50))
            items.append(("room", (clean + floor).astype(np.float32), sentence))
        elif snr is None:
            items.append(("clean", clean, sentence))
        else:
            noise = (talkers.babble(4, len(clean), False) if kind == "babble"
                     else make_noise(kind, rng, len(clean)))
            mixed, _ = mix_at_snr(clean, np.asarray(noise, np.float64), snr)
            items.append((f"{kind} {snr:g} dB", mixed.astype(np.float32), sentence))
        if i % 8 == 7:
            items.append(("babble alone", _at(talkers.babble(int(rng.integers(4, 11)), 8 * SR, False),
                                              rng.uniform(-45, -30)), ""))
    summary = {}
    for spec in args.candidates.split(","):
        counts = {"ms": 0.0, "decodes": 0, "beam": 0}
        timed = copy.copy(stages)
        timed.asr = _TimedAsr(stages.asr, counts)
        options = loop_options(spec)
        by: dict[str, tuple[list, list]] = {}
        empty, invented = 0, []
        for cond, audio, ref in items:
            traces, _ = run_loop(timed, audio, options)
            said = " ".join(t.text or t.translation for t in traces if (t.text or t.translation)).strip()
            if ref:
                for key in (cond, "all", "noisy" if cond != "clean" else "clean"):
                    by.setdefault(key, ([], []))[0].append(ref)
                    by[key][1].append(said)
                empty += not said
            elif said:
                invented.append(said)
            print(json.dumps({"candidate": spec, "condition": cond, "said": said, "ref": ref}, ensure_ascii=False),
                  flush=True)
        summary[spec] = {"wer": {k: round(100 * wer(r, h), 1) for k, (r, h) in sorted(by.items())},
                         "empty": empty, "decodes": counts["decodes"], "beam_decodes": counts["beam"],
                         "asr_s": round(counts["ms"] / 1000, 1), "babble_alone_with_text": invented}
        print(json.dumps({spec: summary[spec]}, ensure_ascii=False), file=sys.stderr, flush=True)
    print(json.dumps(summary, indent=1, ensure_ascii=False), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
