"""When a pause ends the speaker's turn: pure logic over the evidence the loop gathers at a pause.

The endpointer alone ends an utterance after a fixed hangover of silence, so every hesitation
longer than it cuts a sentence in two (the fragment is translated and spoken over the speaker),
and every finished sentence still waits the whole hangover. The policy weighs, at each frame of
a pause:

* the pause length so far;
* the end-of-turn model's probability that the turn is complete (``stages.turn``, run by the
  loop when the speculation runs and again as the pause goes on; absent in hand-built stages);
* the speculative transcript: a trailing comma, ellipsis or a word that cannot end a sentence
  ("and", "the", "because", ...) says incomplete; a sentence-final mark says little on its own
  (Whisper ends almost every fragment with a period), but Whisper's probability of that mark
  (``AsrResult.end_mark_prob``) does: low after a fragment, high after a finished sentence; on a
  translate route it is the *translation's* mark, so where that alone holds the pause, a transcript
  of the same audio in the speaker's own language may replace it (``source_mark_langs``); an
  empty speculation (speech heard, no words yet) says incomplete;
* the speaker's own pauses: the running mean and deviation of the pauses inside utterances
  (those followed by more speech); ``mean + alpha * deviation`` stretches the fallback hangover
  for a speaker who pauses long mid-sentence (as the endpointer's adaptive VAD threshold does
  for noise).

The answer is a :class:`Decision`: the pause length at which this pause ends the turn unless
speech resumes, and why. "complete" ends almost at once, "incomplete" holds up to
``max_pause_ms``, "hangover" (unsure) falls back to the hangover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from edge_rt.stages.asr.tokenizer import SENTENCE_FINAL
from edge_rt.units import VAD_FRAME_MS

__all__ = ["Decision", "TurnOptions", "TurnPolicy", "TextEvidence", "text_evidence", "model_frames", "pause_frames",
           "NOT_FINAL_WORDS"]

# Words after which a sentence cannot end, per language: articles, conjunctions, prepositions,
# possessive determiners, fillers. Words that also end sentences as particles or pronouns
# ("in", "up", "so", German "auf", "zu", "sein") are left out: a wrong "incomplete" costs a held pause,
# a wrong "complete" cuts a sentence.
NOT_FINAL_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset("""a an the and or but nor because of to with for from into onto than if unless although
        whether my your our their its at um uh er uhm erm""".split()),
    "pt": frozenset("""e ou mas porque que de do da dos das o os as um uma uns umas para pra com em no na nos nas
        num numa se meu minha meus minhas seu sua seus suas por pelo pela pelos pelas ao aos à às né""".split()),
    "es": frozenset("""y e o u ni pero porque que de del el la los las un una unos unas para con en a al por mi mis
        tu tus su sus si este esta""".split()),
    "fr": frozenset("""et ou mais parce que qu' de du des le la les l' un une pour avec à au aux dans par sur mon ma
        mes ton ta tes son sa ses notre votre nos vos car si euh""".split()),
    "de": frozenset("""und oder aber weil dass der die das den dem des ein eine einen einem einer eines von mit für
        im am zum zur vom beim wenn als ob sondern mein meine meinen meinem dein deine ähm äh""".split()),
}
CONTINUING = (",", ";", ":", "-", "–", "—", "...", "…", "、", "，", "；", "：")
_STRIP = ".,;:!?…\"'«»“”„¿¡()[]-–—。？！，；：、"


class TextEvidence(NamedTuple):
    verdict: str  # "complete" | "incomplete" | "unknown" (text that says neither) | "none" (no text)
    why: str  # e.g. "trailing 'and'", "ends in ','", "ends in '.'"


def text_evidence(text: str, lang: str) -> TextEvidence:
    """What the (speculative) transcript ``text`` in ``lang`` says about the end of the sentence."""
    t = text.strip()
    if not t:
        return TextEvidence("none", "no text")
    if t.endswith(CONTINUING):
        return TextEvidence("incomplete", f"ends in {t[-1]!r}")
    words = t.split()
    last = words[-1].strip(_STRIP).lower()
    if "'" in last and lang == "fr":  # "qu'" / "l'" survive the strip only as the whole word
        last = last.split("'")[0] + "'"
    if last in NOT_FINAL_WORDS.get(lang, ()):
        return TextEvidence("incomplete", f"trailing {last!r}")
    if t.endswith(SENTENCE_FINAL):
        return TextEvidence("complete", f"ends in {t[-1]!r}")
    return TextEvidence("unknown", "no final punctuation")


@dataclass(frozen=True)
class TurnOptions:
    """Every knob of turn-taking beyond the endpointer's VAD hangover.

    Defaults chosen with ``tools/tune_turn.py`` (default pack INT8, smart-turn v3.2) on the tuning
    half of the real clips (sorted ids, odd indices: 16 clips) plus the same clips with a 0.4-0.8 s
    hesitation of their own room tone spliced in mid-sentence (15 of them): 131 pauses, 15 of them
    spliced hesitations, 83 natural pauses inside speech, 31 real ends. Each clip starts with no
    pause statistics, as each clip of ``edge-rt bench`` does. With these defaults, per pause:
    talk-over (a hesitation ends the utterance) 2/15 (the previous defaults, without Whisper's
    end-mark probability and the empty-speculation rule: 12/15; plain 288 ms hangover: 15/15),
    natural pauses cut 23/83 (35/83, 35/83), wait after the real end p50 64 ms, mean 442 ms (64/326,
    288/288), 17/31 real ends called "complete". With the statistics carried over from clip to clip
    (one speaker, ``--carry``): 1/15 talk-over, 18/83 cut, mean wait 499 ms. The turn model alone
    separates ends from hesitations poorly here (AUC 0.65-0.67 at every pause length), so it only
    ends a turn when it is very sure AND the transcript ends a sentence. Never tuned on the
    even-index clips. The end-mark thresholds are the default pack's (Whisper base): the tiny pack's
    tiny.en gives the mark less steadily ("He could wait no longer." 0.42-0.89 as the utterance's
    start moves by 0.1-0.4 s; base: 0.75-0.82).
    """

    # Turn-model probability at or above which the turn is complete (with a transcript that ends in
    # a sentence-final mark). Tuned over 0.5/0.7/0.85/0.9/0.95/0.98: 0.98 cuts 3 fewer natural pauses
    # but waits p50 192 ms; below 0.95 more cuts for no fewer talk-overs.
    complete_probability: float = 0.95
    # ... below which the pause is a hesitation (held up to max_pause_ms). 0.2 (vs 0.05/0.1): with the
    # end-mark rules, 2/15 talk-over at either; 0.2 cuts one natural pause fewer for +4 ms mean wait.
    incomplete_probability: float = 0.2
    # A pause judged complete ends the utterance at this pause length. The speculation (decode, translation,
    # first clause) starts at 64 ms and took 136-663 ms here (2-core x86, default pack; p50 274-311 ms; ~25 % less
    # since 2026-12-07, when the sessions other than the Whisper decoder stopped spinning, and ~10 % less again since
    # every session spins only while its runs last: SessionOptions.spinning), and
    # the speech cannot start before it is done, so ending sooner buys nothing while every ms more keeps a
    # natural pause of that length inside the sentence. tools/tune_turn.py, "ready" = the later of the
    # declared end and the speculation's end: on the tuning half 64 -> 256 ms cuts 20 -> 13 of 83 natural
    # pauses at a ready wait p50 445 -> 445 ms, mean 602 -> 607 ms (320: no fewer cuts, +6 ms); on the held-out
    # half 20 -> 10 of 77, ready mean 620 -> 622 ms. Live, the two interleaved clip by clip on all 33 clips
    # (tools/loop_ab.py): talk-over 48.5 -> 36.4 %, turn latency P50 1044 -> 593 ms (fewer clips queued
    # behind their own fragments), per-clip median ratio x1.00. On a device whose speculation is shorter
    # (a GPU) this waits for nothing: lower it there (`--complete-after-ms`, `[loop] complete_after_ms`).
    # Loudspeaker mode uses it too since 2026-12-06 (it kept 64 ms before: at 256 the live loudspeaker test had
    # translated our own voice in 2 of 4 runs, before the front end's converging wait and re-convergence; since, 0
    # of 4 runs at 256, one of them in a full test run). There a talk-over costs the speaker's words (AEC3 takes
    # the near end down under our speech): tools/loop_ab.py --vary loudspeaker=on+64,on, 33 clips, talk-over
    # 16 -> 13, live English WER 11.16 -> 9.30 %, P50 x0.96, per-clip median x1.00.
    # Re-recorded on 2026-12-07 (twenty-ninth session, after the spinning change; 2-core Xeon with AVX-VNNI): the
    # speculation still bounds the ready wait, p50 356 ms on the tuning half for every value from 64 to 320 ms
    # (natural pauses cut: 192 -> 19, 224 -> 18, 256 -> 17 of 83) and 344-347 ms on the held-out half (224 and 256
    # both 10 of 67): nothing to gain below 256 here.
    complete_after_ms: int = 256
    # The longest pause held open for a sentence judged incomplete; a speaker silent this long has
    # yielded the turn whatever the evidence says. 1024 ms: same talk-over as 1280, 50 ms less mean wait.
    max_pause_ms: int = 1024
    # Pause lengths at which the loop runs the turn model (40-50 ms a call here, see stages/turn.py): with the
    # speculation, then again as the pause goes on. Adding 128 ms: +3 natural pauses cut, no gain. A call whose
    # answer no decision can read is not made (TurnPolicy.model_frames): with the defaults the one at 64 ms, since
    # no pause ends before 256 ms and the call at 192 ms answers first.
    model_at_ms: tuple[int, ...] = (64, 192, 384, 768)
    # With no turn model, a sentence-final mark alone ends the turn (True), or only stops holding
    # (False: the hangover decides). Off: on the tuning set it ends 7/15 hesitations and 55/83
    # natural pauses (Whisper puts a period after almost every fragment).
    text_alone_ends: bool = False
    # The model's "complete" also needs the transcript to end in a sentence-final mark (when the
    # speculation produced one). On: 4/15 talk-over instead of 6/15 at the same thresholds.
    final_mark_required: bool = True
    # A transcript without a final mark ("fellow wrestlers also pay tribute") is a fragment: hold.
    # Off: 6 of 15 hesitations are unmarked, but so are 3 of 31 real ends, each then held to
    # max_pause_ms; on the front it never beat the final-mark rule.
    unmarked_holds: bool = False
    # Whisper's own probability of a sentence-final mark where the speculative transcript ends
    # (AsrResult.end_mark_prob): at or above mark_complete the sentence is done (with at least
    # min_words words, and unless the model is sure it is not); below mark_incomplete it is a
    # fragment, held like a trailing "and". None: not used. On the tuning set the speculation's marks
    # (Whisper transcribing English, translating the rest) were 0.21-0.97 at real ends, 0.01-0.92 at
    # spliced hesitations; 0.8/0.5 (of 0.8/0.9/off and 0.3/0.5/off): 2/15 talk-over instead of
    # 3-5/15 with either rule off, at +30-60 ms mean wait. On whole English clips against cuts at a
    # word boundary the separation is wider (0.51-0.96 vs 0.008-0.14, tests/stages/asr).
    mark_complete: float | None = 0.8
    mark_incomplete: float | None = 0.5
    # On a translate route (Whisper writes English for speech in another language) that mark is the translation's,
    # and Whisper often marks a finished sentence's translation low: on the tuning half's German, Spanish and French
    # items 4 of 4 real ends it held scored 0.81-0.98 in a transcript of the same audio in its own language. So where
    # the translation's mark alone holds a pause (below mark_incomplete) in one of these languages, the loop
    # transcribes the utterance so far in that language (TurnPolicy.wants_source_mark), and a transcript's mark at or
    # above mark_complete takes the translation's place (note_source_mark); a less sure one leaves the hold. Chosen on
    # tools/tune_turn.py's tuning half (a one-off recording of its non-English items with a transcript at every
    # speculation: any transcript's mark in the translation's place cut 20 of 69 natural pauses, a sure one 17, at 0.85
    # 16, against 15 without; the ends' mean wait 333, 333, 371 against 486 ms). Replayed by the tool (2026-12-07, all
    # items): tuning half talk-over 3/15 either way, natural pauses cut 17 -> 19 of 83, wait after the real end mean
    # 468 -> 369 ms, ready mean 549 -> 487 ms; held-out half 7/17 and 9/67 either way, mean 399 -> 380 ms, ready 477 ->
    # 469 ms (its Spanish ends' transcripts 0.60-0.74: still held). Chinese is left out: Whisper's Chinese transcripts
    # seldom end in a mark (0.01-0.12 at its real ends there). Empty: never.
    source_mark_langs: tuple[str, ...] = ("de", "es", "fr")
    # The speculation heard nothing (the unsure gate or Whisper gave no text) though the VAD heard
    # speech: ending here would speak nothing and leave what follows as a sentence without its start,
    # so hold (the first half of "The cabbage juice changes color ... depending on" came back empty).
    # On: 2 of 15 spliced hesitations had an empty speculation; no real end of the tuning set had one.
    empty_holds: bool = True
    # A transcript shorter than this says nothing about completeness (a lone "Yes." is left to the model).
    min_words: int = 2
    # The speaker's within-utterance pauses: fallback hangover = clamp(mean + alpha * deviation,
    # the endpointer's hangover, max_pause_ms), once min_pauses pauses were seen. alpha 2 (vs 0):
    # one natural pause fewer cut for +5 ms mean wait with fresh statistics per clip; with them carried
    # over (one speaker) it alone, without the turn model, holds 14/15 hesitations at ~900 ms mean wait.
    pause_alpha: float = 2.0
    pause_memory: int = 20  # pauses: time constant of the running mean and deviation (not tuned)
    min_pauses: int = 3  # not tuned
    min_tracked_pause_ms: int = 64  # shorter gaps are VAD jitter inside words, not pauses (not tuned)

    def __post_init__(self):
        if not 0.0 <= self.incomplete_probability <= self.complete_probability <= 1.0:
            raise ValueError("need 0 <= incomplete_probability <= complete_probability <= 1, got "
                             f"{self.incomplete_probability} and {self.complete_probability}")
        if self.complete_after_ms < 0 or self.max_pause_ms <= self.complete_after_ms:
            raise ValueError(f"need 0 <= complete_after_ms < max_pause_ms, got {self.complete_after_ms} "
                             f"and {self.max_pause_ms}")
        if any(m <= 0 for m in self.model_at_ms) or list(self.model_at_ms) != sorted(set(self.model_at_ms)):
            raise ValueError(f"model_at_ms must be increasing positive pause lengths, got {self.model_at_ms}")
        if self.min_words < 1 or self.pause_memory < 1 or self.min_pauses < 1:
            raise ValueError("min_words, pause_memory and min_pauses must be >= 1")
        for name in ("mark_complete", "mark_incomplete"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a probability or None, got {v}")
        if isinstance(self.source_mark_langs, str) or any(not isinstance(x, str) or not x
                                                          for x in self.source_mark_langs):
            raise ValueError(f"source_mark_langs must be language codes, got {self.source_mark_langs!r}")
        if (self.mark_complete is not None and self.mark_incomplete is not None
                and self.mark_incomplete > self.mark_complete):
            raise ValueError(f"need mark_incomplete <= mark_complete, got {self.mark_incomplete} and {self.mark_complete}")
        if self.pause_alpha < 0:
            raise ValueError(f"pause_alpha must be >= 0, got {self.pause_alpha}")


def pause_frames(ms: int) -> int:
    """The silent VAD frames a pause of ``ms`` lasts (rounded up, at least one): where the loop ends a decision's
    pause and runs a model call."""
    return max(1, -(-ms // VAD_FRAME_MS))


def model_frames(options: TurnOptions, hangover_ms: int, *, every: bool = False) -> frozenset[int]:
    """The pause lengths, in VAD frames, at which the loop runs the end-of-turn model.

    ``options.model_at_ms`` less every call whose answer no decision that can end the pause will read: a
    decision ends a pause no sooner than ``complete_after_ms`` or the hangover (which the speaker's statistics
    only stretch), and the policy reads the latest answer, so a call followed by another one at or before that
    earliest end is never read where it matters. With the defaults (64, 192, 384, 768 ms; ends from 256 ms) the
    call at 64 ms goes: replayed over tools/tune_turn.py's recordings of both halves, every pause ends where it
    ended with it (talk-over, natural pauses cut and waits the same), and the worker has 30-40 ms more at every
    pause: live, interleaved with every call made (tools/loop_ab.py --vary turn_calls=all,needed, the 33 clips and
    their paused versions), the same captions and talk-over, turns a median 20 ms shorter per clip (35 of 65 shorter,
    15 longer). With ``complete_after_ms=64`` (a GPU) it stays. ``every``: all of ``model_at_ms``, none left out
    (a tool that records every answer, or the loop as it was before).
    """
    calls = sorted({pause_frames(ms) for ms in options.model_at_ms})
    if every:
        return frozenset(calls)
    earliest = pause_frames(min(options.complete_after_ms, hangover_ms))
    return frozenset(f for f, after in zip(calls, calls[1:] + [None]) if after is None or after > earliest)


class Decision(NamedTuple):
    """This pause ends the turn once it lasts ``end_at_ms`` (unless speech resumes first)."""

    reason: str  # "complete" | "incomplete" | "hangover"
    end_at_ms: int
    why: str = ""  # the evidence, for humans (e.g. "p=0.91, ends in '.'")

    @property
    def end_reason(self) -> str:
        """What the utterance trace says if this decision ends it: an incomplete pause ran out."""
        return "max_pause" if self.reason == "incomplete" else self.reason


class TurnPolicy:
    """Combines the evidence of the current pause; keeps the speaker's pause statistics across utterances.

    The loop calls :meth:`pause_started` at the first silent frame, :meth:`note_text` and
    :meth:`note_turn` when it has evidence, :meth:`decide` at every silent frame, and
    :meth:`speech_resumed` when the pause turned out to be inside the utterance.
    """

    def __init__(self, options: TurnOptions = TurnOptions(), hangover_ms: int = 288):
        self.options = options
        self.hangover_ms = hangover_ms
        self.model_frames = model_frames(options, hangover_ms)
        self._decay = 1.0 - 1.0 / options.pause_memory
        self.pauses_seen = 0
        self._mean = 0.0
        self._var = 0.0
        self._forget()

    # -- evidence ------------------------------------------------------------------
    def pause_started(self) -> None:
        """A new pause (the first silent frame): forget the previous pause's evidence."""
        self._forget()

    def _forget(self) -> None:
        self.text: TextEvidence = TextEvidence("none", "no text")
        self.p_complete: float | None = None
        self.mark: float | None = None
        self._words = 0
        self._spoken = False
        self._source_noted = False  # a transcript's mark was asked for (wants_source_mark) and given
        self._source_mark = False  # ... and it took the place of the translation's

    def note_text(self, text: str, lang: str, end_mark_prob: float = float("nan")) -> None:
        """The speculative transcript of the utterance up to this pause, and Whisper's probability
        that a sentence-final mark ends it (NaN: not known)."""
        self.text = text_evidence(text, lang)
        self._words = len(text.split())
        self._spoken = True  # a speculation ran (its text may be empty)
        self.mark = None if math.isnan(end_mark_prob) else float(end_mark_prob)
        self._source_noted = self._source_mark = False

    def wants_source_mark(self, lang: str) -> bool:
        """Whether a transcript of the utterance in ``lang``, its own language, could end this pause sooner: the
        speculation was a translation (``note_text`` was given its text) whose end mark alone holds the pause, and
        ``lang`` is one of ``source_mark_langs``."""
        o = self.options
        return (lang in o.source_mark_langs and o.mark_complete is not None and not self._source_noted
                and self._held_by_mark())

    def note_source_mark(self, end_mark_prob: float) -> None:
        """Whisper's probability of a sentence-final mark where a transcript of the utterance so far, in its own
        language, ends (see ``wants_source_mark``): at or above ``mark_complete`` it takes the place of the
        translation's mark; below, the translation's stands."""
        self._source_noted = True
        o = self.options
        if not math.isnan(end_mark_prob) and o.mark_complete is not None and end_mark_prob >= o.mark_complete:
            self.mark = float(end_mark_prob)
            self._source_mark = True

    @property
    def source_mark_used(self) -> bool:
        """Whether this pause's end mark is a transcript's in the speaker's own language (note_source_mark)."""
        return self._source_mark

    def note_turn(self, p_complete: float) -> None:
        """The end-of-turn model's latest probability that the turn is complete."""
        self.p_complete = float(p_complete)

    def speech_resumed(self, pause_ms: float) -> None:
        """A pause of ``pause_ms`` was inside the utterance: update the speaker's statistics."""
        if pause_ms >= self.options.min_tracked_pause_ms:
            if self.pauses_seen == 0:
                self._mean, self._var = pause_ms, 0.0
            else:
                d = self._decay
                delta = pause_ms - self._mean
                self._mean += (1 - d) * delta
                self._var = d * (self._var + (1 - d) * delta * delta)
            self.pauses_seen += 1
        self._forget()

    @property
    def hangover(self) -> int:
        """The fallback pause (ms): the endpointer's hangover, stretched by the speaker's own pauses."""
        o = self.options
        if self.pauses_seen < o.min_pauses:
            return self.hangover_ms
        adaptive = self._mean + o.pause_alpha * math.sqrt(self._var)
        return int(min(o.max_pause_ms, max(self.hangover_ms, adaptive)))

    # -- decision ------------------------------------------------------------------
    def _held_by_mark(self) -> bool:
        """The end mark alone holds this pause: below ``mark_incomplete``, with enough words, and no other rule
        holds it."""
        o = self.options
        return (self.mark is not None and o.mark_incomplete is not None and self.mark < o.mark_incomplete
                and self._words >= o.min_words and self.text.verdict != "incomplete"
                and not (o.unmarked_holds and self.text.verdict == "unknown"))

    @property
    def settled_hold(self) -> bool:
        """Whether the speculation's evidence (its text, Whisper's end mark, or no words at all) holds this pause to
        ``max_pause_ms`` whatever the turn model answers later: only speech resuming ends the hold sooner."""
        o = self.options
        enough = self._words >= o.min_words
        if self.text.verdict == "incomplete" or (o.unmarked_holds and self.text.verdict == "unknown" and enough):
            return True
        if self.mark is not None and o.mark_incomplete is not None and self.mark < o.mark_incomplete and enough:
            return True
        return o.empty_holds and self.text.verdict == "none" and self._spoken

    def decide(self) -> Decision:
        """The verdict on the current pause from the evidence so far."""
        o = self.options
        p = self.p_complete
        text = self.text
        enough = self._words >= o.min_words
        m = self.mark
        why = ((f"p={p:.2f}, " if p is not None else "") + (f"mark={m:.2f}, " if m is not None else "")
               + ("in its own language, " if self._source_mark else "") + text.why)
        if self.settled_hold or (p is not None and p < o.incomplete_probability):
            return Decision("incomplete", o.max_pause_ms, why)
        if m is not None and o.mark_complete is not None and m >= o.mark_complete and enough:
            return Decision("complete", o.complete_after_ms, why)
        if p is not None:
            if p >= o.complete_probability and (text.verdict in ("complete", "none") or not o.final_mark_required):
                return Decision("complete", o.complete_after_ms, why)
        elif o.text_alone_ends and text.verdict == "complete" and enough:
            return Decision("complete", o.complete_after_ms, why)
        return Decision("hangover", self.hangover, why)
