#!/usr/bin/env python
"""Choose the turn policy's defaults (edge_rt/loop/turn_policy.py) on a tuning split, never on the reported clips.

Tuning set: the real clips' ids sorted, the odd indices (``--half tune``; the even indices are
``--half report``), each once as recorded and once with a 0.4-0.8 s hesitation of its own room
tone spliced in mid-sentence (edge_rt/measure/paused.py; the length is picked per clip from its id).

Two steps, so a grid of settings costs one pass of the models:

1. **record**: every item runs through the real loop (file source, the pack's stages, no partials)
   with a recording policy that holds every pause open up to ``--record-max-ms`` and logs, per pause,
   where it starts, how long it lasted (or that it was the end), the speculative transcript at the
   speculation point and the end-of-turn model's probability at every candidate pause length;
2. **simulate**: each setting's :class:`TurnPolicy` is replayed over the recorded evidence, frame by
   frame, each item with a fresh policy as in `edge-rt bench` (``--carry``: one policy for the whole
   session, the speaker statistics carrying over from item to item).

Per setting it prints: talk-over (spliced items whose utterance ended inside the spliced hesitation),
split (items cut at any pause before the real end, natural pauses included), the end wait (audio ms
from the end of speech to the end being declared; compute is not included) and the ready wait: the
later of the declared end and the speculation's end (``speculate_after_ms`` + the wall-clock time the
recording measured for the decode, translation and first clause at that pause, and for the transcript in
the speaker's own language where the policy asks for one: TurnOptions.source_mark_langs), the earliest the
speech could start. Then the same for the defaults with each ``complete_after_ms``.

    python tools/tune_turn.py --pack default --precision int8 --half tune [--cache /tmp/turn_tune.json] [--postroll-ms 64]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.audio.files import read_audio  # noqa: E402
from edge_rt.audio.sinks import TimelineSink  # noqa: E402
from edge_rt.audio.sources import FastFileSource  # noqa: E402
from edge_rt.loop.endpoint import EndpointOptions  # noqa: E402
from edge_rt.loop.loop import Loop, LoopOptions  # noqa: E402
from edge_rt.loop.turn_policy import Decision, TurnOptions, TurnPolicy, model_frames, pause_frames  # noqa: E402
from edge_rt.measure.bench import oracle_end  # noqa: E402
from edge_rt.measure.paused import PauseOptions, paused_clip  # noqa: E402
from edge_rt.units import SAMPLE_RATE, VAD_FRAME_MS  # noqa: E402

CANDIDATE_MS = (64, 128, 192, 384, 768)  # pause lengths at which the model's p is recorded
SLACK = SAMPLE_RATE // 4  # a pause starting up to 250 ms before a spliced hesitation is that hesitation


@dataclass
class Pause:
    item: str
    start: int  # speech_end_sample of the pause (item samples)
    frames: int | None = None  # silent frames before speech resumed; None: the utterance ended here
    text: str | None = None
    lang: str = ""
    mark: float | None = None  # Whisper's P(sentence-final mark) at the end of that transcript (None: NaN)
    p: dict[int, float] = field(default_factory=dict)  # pause ms -> P(complete)
    # Wall-clock ms the speculation at this pause took (decode, translation, first clause): the end's
    # speech cannot start sooner than speculate_after_ms + this, whatever the policy decides.
    spec_ms: float | None = None
    # On a translate route: the speaker's language and Whisper's end mark of a transcript in it, of the same audio
    # (TurnOptions.source_mark_langs; recorded at every such speculation, used where the policy asks for it).
    source_lang: str = ""
    source_mark: float | None = None
    source_ms: float | None = None  # wall-clock ms that transcript took (after the speculation)


@dataclass
class Item:
    id: str
    audio: np.ndarray
    hesitation: tuple[int, int] | None  # the spliced pause [start, end)
    final_end: int


class RecordingPolicy(TurnPolicy):
    """Holds every pause to ``hold_ms`` and logs the evidence the loop hands over."""

    def __init__(self, loop: Loop, item: str, log: list[Pause], hold_ms: int):
        super().__init__(TurnOptions(model_at_ms=CANDIDATE_MS, max_pause_ms=hold_ms), hangover_ms=288)
        self.loop, self.item, self.log, self.hold_ms = loop, item, log, hold_ms
        # every candidate, including those a policy's decisions would never read (turn_policy.model_frames)
        self.model_frames = model_frames(self.options, self.hangover_ms, every=True)

    def pause_started(self) -> None:
        super().pause_started()
        if getattr(self, "loop", None) is not None and self.loop.endpointer.in_speech:
            self.log.append(Pause(self.item, self.loop.endpointer.speech_end_sample))

    def note_text(self, text: str, lang: str, end_mark_prob: float = float("nan")) -> None:
        self.log[-1].text, self.log[-1].lang = text, lang
        self.log[-1].mark = None if end_mark_prob != end_mark_prob else float(end_mark_prob)

    def wants_source_mark(self, lang: str) -> bool:
        self.log[-1].source_lang = lang
        self._t_source = time.perf_counter()
        return lang in self.options.source_mark_langs  # at every speculation, not only where the mark holds

    def note_source_mark(self, end_mark_prob: float) -> None:
        self.log[-1].source_mark = None if end_mark_prob != end_mark_prob else float(end_mark_prob)
        self.log[-1].source_ms = (time.perf_counter() - self._t_source) * 1000

    def note_turn(self, p_complete: float) -> None:
        self.log[-1].p[self.loop.endpointer.silence_frames * VAD_FRAME_MS] = float(p_complete)

    def speech_resumed(self, pause_ms: float) -> None:
        self.log[-1].frames = int(pause_ms // VAD_FRAME_MS)
        super().speech_resumed(pause_ms)

    def decide(self) -> Decision:
        return Decision("incomplete", self.hold_ms, "recording")


def tuning_items(speech_dir: Path, half: str, vad) -> list[Item]:
    manifest = [json.loads(x) for x in (speech_dir / "manifest.jsonl").read_text().splitlines() if x.strip()]
    ids = sorted(m["id"] for m in manifest)
    chosen = ids[1::2] if half == "tune" else ids[0::2]
    by_id = {m["id"]: m for m in manifest}
    items = []
    for cid in chosen:
        audio = read_audio(speech_dir / by_id[cid]["audio"])
        items.append(Item(cid, audio, None, oracle_end(vad, audio)))  # the bench's oracle end
        pause_ms = 400 + 100 * (zlib.crc32(cid.encode()) % 5)  # 400..800 ms, fixed per clip
        pc = paused_clip(cid, audio, vad, PauseOptions(pause_ms=pause_ms))
        if pc is not None:
            items.append(Item(f"{cid}+{pause_ms}ms", pc.audio, pc.pauses[0], pc.final_end))
    return items


def record(stages, items: list[Item], hold_ms: int, postroll_ms: int = 0) -> list[Pause]:
    log: list[Pause] = []
    for it in items:
        source = FastFileSource(it.audio, tail_s=2.5)
        sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / SAMPLE_RATE)
        target = "pt" if it.id.startswith("en_") else "en"
        loop = Loop(stages, source, sink, LoopOptions(target=target, partials=False,
                                                      endpoint=EndpointOptions(postroll_ms=postroll_ms),
                                                      turn=TurnOptions(model_at_ms=CANDIDATE_MS, max_pause_ms=hold_ms)))
        loop.turn_policy = RecordingPolicy(loop, it.id, log, hold_ms)
        # The evidence and the speculation's time (decode, translation, first clause, as the live loop does
        # it at a pause); no final decode (2 cores: the recording is the cost).
        loop._maybe_speculate = _timed(loop, loop._maybe_speculate, log)
        loop._finalize = lambda tr, *evidence: loop._close(tr)
        loop.run()
        print(f"  recorded {it.id}: {sum(p.item == it.id for p in log)} pauses", file=sys.stderr)
    return log


def _timed(loop: Loop, speculate, log: list[Pause]):
    """``loop._maybe_speculate`` that notes its wall-clock time on the current pause's record."""

    def run() -> bool:
        t0 = time.perf_counter()
        ran = speculate()
        if ran and log and log[-1].start == loop.endpointer.speech_end_sample:
            log[-1].spec_ms = (time.perf_counter() - t0) * 1000
        return ran
    return run


def simulate(options: TurnOptions | None, items: list[Item], log: list[Pause], use_model: bool,
             hangover_ms: int = 288, speculate_frames: int = 2, carry: bool = False) -> dict:
    """Replay every recorded pause through one session's policy (None: the plain hangover).

    ``carry``: one policy for the whole session (the speaker statistics carry over from item to
    item, as for one speaker in a long session); else each item starts with none, as every clip of
    ``edge-rt bench`` does (a new loop per clip).

    Each pause is judged on its own (an earlier cut does not hide a later hesitation): a spliced
    hesitation that ends the utterance is talk-over, a natural pause inside the speech that ends
    it is a split, and at the real end the wait is measured.
    """
    policy = TurnPolicy(options, hangover_ms) if options else None
    by_id = {it.id: it for it in items}
    talk = hes = split = internal = 0
    waits, ready, complete = [], [], 0
    current = None
    for pause in log:
        it = by_id[pause.item]
        if policy is not None and not carry and pause.item != current:  # a new speaker: no pause statistics
            policy = TurnPolicy(options, hangover_ms)
        current = pause.item
        ended = _end_frame(policy, pause, use_model, hangover_ms, speculate_frames)
        if pause.start >= it.final_end - SLACK:  # the real end (or trailing noise after it)
            if ended is not None:
                waits.append(ended[0] * VAD_FRAME_MS)
                complete += ended[1] == "complete"
                # The speech can start once the end is declared AND the work done at the pause is ready (with the
                # transcript in the speaker's language where the policy asked for one).
                spec = speculate_frames * VAD_FRAME_MS + (pause.spec_ms or 0.0) + (ended[2] and pause.source_ms or 0.0)
                ready.append(max(ended[0] * VAD_FRAME_MS, spec))
            continue
        if pause.frames is None:  # the recording itself ended here (a pause longer than the hold)
            continue
        if it.hesitation and it.hesitation[0] - SLACK <= pause.start < it.hesitation[1]:
            hes += 1
            talk += ended is not None
        else:
            internal += 1
            split += ended is not None
        if policy is not None:
            policy.speech_resumed(pause.frames * VAD_FRAME_MS)
    w = np.array(waits or [np.nan])
    r = np.array(ready or [np.nan])
    return dict(talk_over=f"{talk}/{hes}", split=f"{split}/{internal}", wait_p50=float(np.median(w)),
                wait_p90=float(np.percentile(w, 90)), wait_mean=float(w.mean()), complete=complete,
                finals=len(waits), ready_p50=float(np.median(r)), ready_mean=float(r.mean()))


def _end_frame(policy, pause: Pause, use_model: bool, hangover_ms: int, speculate_frames: int):
    """(frame, reason, whether a transcript in the speaker's language was asked for) at which ``pause`` ends the
    utterance, or None if speech resumes first."""
    limit = pause.frames if pause.frames is not None else 10_000
    if policy is None:
        f = -(-hangover_ms // VAD_FRAME_MS)
        return (f, "hangover", False) if f <= limit else None
    policy.pause_started()
    asked = False
    for f in range(1, limit + 1):
        if f == speculate_frames and pause.text is not None:
            policy.note_text(pause.text, pause.lang, float("nan") if pause.mark is None else pause.mark)
            if pause.source_lang and policy.wants_source_mark(pause.source_lang):
                asked = True
                policy.note_source_mark(float("nan") if pause.source_mark is None else pause.source_mark)
        ms = f * VAD_FRAME_MS
        if use_model and f in policy.model_frames and ms in pause.p:  # the calls the loop makes (model_frames)
            policy.note_turn(pause.p[ms])
        d = policy.decide()
        if f >= pause_frames(d.end_at_ms):
            return f, d.end_reason, asked
    return None


def grid() -> list[tuple[str, TurnOptions | None, bool]]:
    base = TurnOptions()
    out: list[tuple[str, TurnOptions | None, bool]] = [
        ("plain hangover 288 ms (turn=None)", None, False), ("the defaults, TurnOptions()", base, True),
        ("the defaults without the turn model", base, False),
        ("the defaults, a translation's mark alone (source_mark_langs=())", replace(base, source_mark_langs=()), True)]
    # The earlier grids search without Whisper's end mark and the empty-speculation rule (their names
    # say only what they vary); the last two add them.
    plain = replace(base, mark_complete=None, mark_incomplete=None, empty_holds=False)
    for alone, unmarked, alpha, mx in itertools.product((False, True), (False, True), (0.0, 1.0, 2.0), (1024, 1280)):
        o = replace(plain, unmarked_holds=unmarked, text_alone_ends=alone, pause_alpha=alpha, max_pause_ms=mx)
        out.append((f"no model, text_alone_ends={alone:d} unm={unmarked:d} a={alpha} max={mx}", o, False))
    for c, i, after, mx, alpha, at, mark, unmarked in itertools.product(
            (0.5, 0.7, 0.85, 0.95, 0.98), (0.05, 0.2, 0.35), (64, 96), (1024, 1280), (0.0, 1.0, 2.0),
            ((64, 192, 384, 768), (64, 128, 192, 384, 768)), (False, True), (False, True)):
        if i >= c:
            continue
        o = replace(plain, complete_probability=c, incomplete_probability=i, complete_after_ms=after,
                    max_pause_ms=mx, pause_alpha=alpha, model_at_ms=at, final_mark_required=mark,
                    unmarked_holds=unmarked)
        out.append((f"c={c} i={i} after={after} max={mx} a={alpha} at={at[1]} mark={mark:d} unm={unmarked:d}", o, True))
    # An empty speculation holds; with the text, model and end-mark rules around it.
    for empty, unmarked, c, i, mc, mi, alpha in itertools.product(
            (False, True), (False, True), (0.9, 0.95, 0.98), (0.05, 0.1, 0.2), (None, 0.8, 0.9), (None, 0.3, 0.5),
            (0.0, 2.0)):
        if mc is not None and mi is not None and mi > mc:
            continue
        o = replace(plain, empty_holds=empty, unmarked_holds=unmarked, complete_probability=c, incomplete_probability=i,
                    mark_complete=mc, mark_incomplete=mi, pause_alpha=alpha)
        out.append((f"empty={empty:d} unm={unmarked:d} c={c} i={i} mc={mc} mi={mi} a={alpha}", o, True))
    # Whisper's end-mark probability, with and without the turn model.
    for mc, mi, model, alpha, mx in itertools.product((None, 0.7, 0.8, 0.9, 0.95, 0.98), (None, 0.2, 0.35, 0.5, 0.65, 0.8),
                                                      (False, True), (0.0, 2.0), (1024, 1280)):
        if mc is None and mi is None or (mc is not None and mi is not None and mi > mc):
            continue
        o = replace(plain, mark_complete=mc, mark_incomplete=mi, pause_alpha=alpha, max_pause_ms=mx)
        out.append((f"mark c={mc} i={mi} model={model:d} a={alpha} max={mx}", o, model))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pack", default="default")
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--half", choices=("tune", "report"), default="tune")
    ap.add_argument("--speech-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "speech"))
    ap.add_argument("--cache", default=None, help="JSON file: reuse a recording (written if missing)")
    ap.add_argument("--record-max-ms", type=int, default=1600)
    ap.add_argument("--postroll-ms", type=int, default=EndpointOptions().postroll_ms,
                    help="EndpointOptions.postroll_ms of the recording's loop: the audio after the last speech frame "
                         "that the speculation decodes, which moves Whisper's end-mark probability (default: the loop's)")
    ap.add_argument("--carry", action="store_true",
                    help="one speaker for the whole set (pause statistics carry over); default: each item starts "
                         "fresh, as each clip of edge-rt bench does")
    ap.add_argument("--top", type=int, default=25, help="settings to print (best talk-over, then wait)")
    args = ap.parse_args(argv)
    from edge_rt.pipeline import Pipeline, StageOptions

    pipe = Pipeline.load(args.pack, StageOptions(precision=args.precision, backend="cpu"))
    stages = pipe.stages
    if getattr(stages, "turn", None) is None and "turn" in pipe.pack.manifest.get("stages", {}):
        # The pack has the model but these stages were loaded without it (pipeline.py not wired yet).
        from edge_rt.backends.factory import choose_backend, engine_factory
        from edge_rt.stages.turn import SmartTurn

        stages.turn = SmartTurn.from_pack(pipe.pack, engines=engine_factory(pipe.pack, choose_backend(pipe.pack, "cpu")))
    if getattr(stages, "turn", None) is None:
        print("this pack's stages have no end-of-turn model: only the text and pause rules are tuned", file=sys.stderr)
    items = tuning_items(Path(args.speech_dir), args.half, stages.vad)
    cache = Path(args.cache) if args.cache else None
    if cache is not None and cache.is_file():
        log = [Pause(**{**d, "p": {int(k): v for k, v in d["p"].items()}}) for d in json.loads(cache.read_text())]
    else:
        log = record(stages, items, args.record_max_ms, args.postroll_ms)
        if cache is not None:
            cache.write_text(json.dumps([asdict(p) for p in log]))
    rows = [(name, simulate(o, items, log, model, carry=args.carry)) for name, o, model in grid()]
    fixed, tuned = rows[:4], rows[4:]
    count = lambda r, k: int(r[1][k].split("/")[0])  # noqa: E731
    # The Pareto front over (talk-over, split, mean wait): no other setting is at least as good on all three.
    front = [r for r in tuned if not any(
        count(q, "talk_over") <= count(r, "talk_over") and count(q, "split") <= count(r, "split")
        and q[1]["wait_mean"] <= r[1]["wait_mean"] and q[1] != r[1] for q in tuned)]
    unique = {}
    for r in front:  # settings the evidence cannot tell apart: the first name stands for them
        unique.setdefault((r[1]["talk_over"], r[1]["split"], round(r[1]["wait_mean"])), r)
    key = lambda r: (count(r, "talk_over"), r[1]["wait_mean"])  # noqa: E731
    print(f"{len(items)} items ({args.half} half), {len(log)} pauses; the Pareto front of {len(tuned)} settings")
    _table(fixed + sorted(unique.values(), key=key)[: args.top])
    # When a complete sentence ends: below the speculation's own time an earlier end buys nothing (the speech
    # is not ready), and every ms more keeps a natural pause of that length inside the sentence.
    base = TurnOptions()
    print("\nthe defaults with another complete_after_ms (ready = max(declared end, 64 ms + the speculation's time)):")
    _table([(f"complete_after_ms={a}", simulate(replace(base, complete_after_ms=a), items, log, True, carry=args.carry))
            for a in (64, 128, 160, 192, 224, 256, 320, 384, 448, 512)])
    return 0


def _table(rows) -> None:
    print(f"{'setting':70s} {'talk-over':>9s} {'split':>6s} {'wait p50':>8s} {'p90':>6s} {'mean':>6s} "
          f"{'ready p50':>9s} {'mean':>6s} complete")
    for name, m in rows:
        print(f"{name:70s} {m['talk_over']:>9s} {m['split']:>6s} {m['wait_p50']:8.0f} {m['wait_p90']:6.0f} "
              f"{m['wait_mean']:6.0f} {m['ready_p50']:9.0f} {m['ready_mean']:6.0f} {m['complete']}/{m['finals']}")


if __name__ == "__main__":
    sys.exit(main())
