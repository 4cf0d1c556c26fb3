"""What several sub-commands share: stage options from the flags, the backend line, caption printing."""

from __future__ import annotations

import argparse


def _stage_options(args: argparse.Namespace):
    from edge_rt.pipeline import StageOptions

    return StageOptions(precision=args.precision, threads=args.threads, backend=args.backend,
                        target=getattr(args, "to", None))


def _turn_options(args: argparse.Namespace):
    """TurnOptions with ``--complete-after-ms`` when given (else the policy's defaults, loudspeaker mode too)."""
    from edge_rt.loop.turn_policy import TurnOptions

    after = args.complete_after_ms
    if after is None:
        return TurnOptions()
    try:
        return TurnOptions(complete_after_ms=after)
    except ValueError as e:
        from edge_rt.errors import EdgeRtError

        raise EdgeRtError(f"--complete-after-ms {args.complete_after_ms}: {e}") from e


def _say_backend(console, pipe) -> None:
    console.print(f"backend: {pipe.backend.name} ({pipe.backend.reason})", highlight=False)


def _show_caption(console):
    """Print live captions: partials rewrite one status line on a terminal (skipped in a log, e.g. under systemd);
    finals and translations are lines, so a log keeps them."""
    def show(event) -> None:
        if not event.transient:
            console.print(event.markup(), highlight=False, soft_wrap=True)
        elif console.is_terminal:
            console.print(event.markup(), end="\r", highlight=False, soft_wrap=True)
    return show


def _off_or(text: str, flag: str, make, expected: str):
    """A ``--flag off|NUMBER`` value: None for ``off``, else ``make(number)``; a bad value (not a number, or one
    ``make`` refuses) is argparse's error naming ``expected``."""
    if text.strip().lower() == "off":
        return None
    try:
        return make(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} takes off or {expected}; got {text!r}") from None


def redecode(text: str):
    """``--redecode``: ``off``, or the average log-probability below which a greedy decode is decoded again with a
    beam of 5 (LoopOptions.redecode)."""
    from edge_rt.loop.redecode import RedecodeOptions

    return _off_or(text, "--redecode", lambda v: RedecodeOptions(below_logprob=v),
                   "a log-probability below 0, e.g. --redecode -0.5")


def add_redecode_arg(p) -> None:
    """--redecode: when an unsure greedy decode is decoded again with a beam (LoopOptions.redecode)."""
    from edge_rt.loop.redecode import RedecodeOptions

    p.add_argument("--redecode", type=redecode, default=RedecodeOptions(), metavar="LOGPROB|off",
                   help=f"decode an utterance again with a beam of 5 when greedy's average log-probability is below "
                        f"this (default {RedecodeOptions.below_logprob}; off: greedy only). In steady noise it closes "
                        f"most of the gap to faster-whisper's beam; clean speech is rarely decoded twice (README, Noise)")


def split(text: str):
    """``--split``: ``off``, or the text tokens per second of utterance below which a transcript is decoded again in
    pieces (LoopOptions.split)."""
    from edge_rt.loop.split import SplitOptions

    return _off_or(text, "--split", lambda v: SplitOptions(below_tokens_per_s=v),
                   "a rate above 0 (text tokens per second of utterance), e.g. --split 1.2")


def add_split_arg(p) -> None:
    """--split: when a transcript too sparse for its utterance is decoded again in pieces (LoopOptions.split)."""
    from edge_rt.loop.split import SplitOptions

    p.add_argument("--split", type=split, default=SplitOptions(), metavar="TOKENS_PER_S|off",
                   help=f"decode an utterance again in pieces, cut at its quietest moments, when its transcript has "
                        f"fewer text tokens than this per second (default {SplitOptions.below_tokens_per_s}; off: "
                        f"never). In noise Whisper can end a decode early and drop the rest of a sentence (README, "
                        f"Noise)")


def noisy_preroll(text: str):
    """``--noisy-preroll``: ``off``, or the dB under which an utterance that opens out of noise starts further back
    (LoopOptions.noisy_preroll)."""
    from edge_rt.loop.preroll import NoisyPrerollOptions

    return _off_or(text, "--noisy-preroll", lambda v: NoisyPrerollOptions(below_db=v),
                   "a level in dB above 0, e.g. --noisy-preroll 20")


def add_noisy_preroll_arg(p) -> None:
    """--noisy-preroll: when an utterance that opens out of noise starts further back (LoopOptions.noisy_preroll)."""
    from edge_rt.loop.preroll import NoisyPrerollOptions

    o = NoisyPrerollOptions()
    p.add_argument("--noisy-preroll", type=noisy_preroll, default=o, metavar="DB|off",
                   help=f"start an utterance {o.extra_ms} ms further back when the speech that opened it stands less "
                        f"than this many dB over the second before it (default {o.below_db:g}; off: never). Under "
                        f"noise the VAD opens late, inside the first word (README, Noise)")


def sound_start(text: str):
    """``--sound-start``: ``off``, or the dB over the room's floor of a sound an utterance's pre-roll should not cut
    (LoopOptions.sound_start)."""
    from edge_rt.loop.preroll import SoundStartOptions

    return _off_or(text, "--sound-start", lambda v: SoundStartOptions(above_db=v),
                   "a level in dB above 0, e.g. --sound-start 10")


def add_sound_start_arg(p) -> None:
    """--sound-start: where an utterance out of a quiet room starts when its pre-roll would cut a sound
    (LoopOptions.sound_start)."""
    from edge_rt.loop.preroll import SoundStartOptions

    o = SoundStartOptions()
    p.add_argument("--sound-start", type=sound_start, default=o, metavar="DB|off",
                   help=f"out of a quiet room, start an utterance whose pre-roll begins inside a sound this many dB "
                        f"over the room's floor where that sound begins, at most {o.max_ms} ms further back (default "
                        f"{o.above_db:g}; off: never). The VAD scores a soft first sound (\"Stuff\") low and opens "
                        f"late (README, Turn-taking)")


def beam_size(text: str) -> int:
    """``--beam``: 1 (greedy) to 16 hypotheses."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 16:
        raise argparse.ArgumentTypeError(f"--beam takes 1 (greedy) to 16 hypotheses, e.g. --beam 5; got {text!r}")
    return n


def add_paused_args(p, what: str) -> None:
    """--paused / --pause-ms: ``what`` is run on the clips with a word-search pause inserted (measure/paused.py)."""
    p.add_argument("--paused", action="store_true",
                   help=f"{what}: each clip with a word-search pause inside a sentence")
    p.add_argument("--pause-ms", type=int, default=None, metavar="MS", help="with --paused: pause length (default 600)")


def paused_options(args: argparse.Namespace):
    """PauseOptions for --paused / --pause-ms (None: no paused-speech set)."""
    from edge_rt.errors import EdgeRtError

    if not args.paused:
        if args.pause_ms is not None:
            raise EdgeRtError("--pause-ms needs --paused")
        return None
    from edge_rt.measure.paused import PauseOptions

    try:
        return PauseOptions() if args.pause_ms is None else PauseOptions(pause_ms=args.pause_ms)
    except ValueError as e:
        raise EdgeRtError(f"--pause-ms: {e}") from e
