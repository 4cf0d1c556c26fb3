"""What one utterance hands to the next: its language and its text.

A pause that ends an utterance does not end the conversation. When the next utterance starts
within ``within_s`` of the previous one's end:

* **language carry-over**: Whisper's language detection on a short fragment is often wrong
  ("However" heard as Chinese, an English fragment as Latin); the previous utterance's language
  is kept unless the detection is sure (probability at least ``switch_prob``);
* **context**: Whisper may be conditioned on the previous final text (``<|startofprev|>``, as
  faster-whisper's ``condition_on_previous_text``), when the new utterance is in the same language;
* **joint decoding**: the new utterance is decoded together with the previous one's audio, and what
  follows the previous text is its text (continuation.py): the sentence a pause split is heard whole;
* **a dropped opening lent**: when the unsure gate dropped the previous utterance (Whisper wrote words,
  too unsure to say them) and a new one starts within ``lend_within_s``, the new one is decoded once
  more with that audio in front of it (recognize.py keeps it when it holds the new one's words).

Pure bookkeeping over sample indices; the loop calls :meth:`Context.remember` when an utterance's
final text is known and :meth:`Context.at` before decoding the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from edge_rt.stages.asr.whisper import Prompt
from edge_rt.units import SAMPLE_RATE

__all__ = ["AsrContext", "Context", "ContextOptions", "KeepLanguage", "Known"]


@dataclass(frozen=True)
class ContextOptions:
    # An utterance that starts this soon after the previous one ended continues it (same speaker,
    # same language). A hesitation or a breath is 0.3-2 s; 5 s keeps a sentence's halves together
    # and lets a long silence (someone else, a new topic) start fresh.
    within_s: float = 5.0
    # Keep the previous language unless Whisper detects another one with at least this probability
    # (None: no carry-over). Chosen on the non-English clips' random 0.6-2.5 s fragments (200 detected
    # right, 73 wrong): at 0.85 one wrong detection of 73 passes and every whole clip (21/21, lowest
    # 0.87) switches; the held-out English fragments' wrong detections all fall below 0.57.
    switch_prob: float | None = 0.85
    # Condition Whisper on the previous final text. Off: on the 12 English clips through the loop
    # (translate path, int8) WER went from 9.77 % without to 10.70 % with it (an earlier turn policy:
    # 13.95 % -> 13.49 %, within one word), and it cost 39 % more decoder steps (429 -> 595), each
    # on the critical path (the one-step decoder has no prefill).
    prompt: bool = False
    # Decode a follow-up utterance together with the previous one's audio and keep the text after the
    # previous text (continuation.py); on transcribe routes, in languages written with spaces. On the
    # loop's own cuts of the 12 English clips in pink, brown and music noise at 5 and 10 dB (language
    # given), WER summed over the six conditions and clean went 118.1 -> 107.4 points (clean 6.98 ->
    # 6.05 %, music 5 dB 11.6 -> 12.6 %); Whisper's ``prefix`` with the previous text forced instead
    # made the continuation repeat the prefix in music. Chosen on those clips, the method has no tuned
    # knob but the fallback below. Costs the previous utterance's decoder steps again.
    joint: bool = True
    # A joint transcript whose beginning differs from the previous text by more than this many word
    # edits per word is not trusted: the utterance is decoded on its own (2 of 57 there). Not tuned.
    joint_max_cost: float = 0.5
    # A continuation with fewer words than this per second of the new utterance's audio is not trusted
    # either: Whisper may leave a repeated phrase out of a joint transcript (the same sentence said twice
    # came back as "He hoped ... carrots and b"). Read English is 2-3 words/s. Not tuned.
    joint_min_words_per_s: float = 0.5
    joint_max_s: float = 28.0  # the two utterances must fit one Whisper window with room to spare
    # A follow-up shorter than this is decoded on its own: given a whole sentence and a fraction of a
    # second more, Whisper writes one more word of the sentence (tiny.en live and through `translate`: the
    # 0.23-0.29 s after JFK's last word, breath and room, came back as "Ask"; decoded alone, as "."). A short
    # word ("yes") is ~0.3 s and is heard alone. None of the 198 utterances with text in the noisy eval
    # (default pack; 12 English clips clean and in babble, brown, pink and music at 5 and 10 dB) was under
    # 0.4 s, so this changes none of them. Not tuned.
    joint_min_s: float = 0.4
    # An utterance the unsure gate dropped (Whisper wrote words it was unsure of) is lent to one that starts
    # within this many seconds after it: the new utterance is decoded once more with the dropped audio in
    # front, and that decode is taken when it ends in the new utterance's own words (recognize.py). In
    # noise the gate drops a sentence's opening that came out of nowhere ("and so my fellow there",
    # log-probability -1.01, P(no speech) 0.31: JFK in pink noise at 5 dB), while the rest, 0.86 s later,
    # passes. 2 s: a hesitation or a breath (within_s's 0.3-2 s); None: off. Not tuned: on generated audio
    # (tools/tune_redecode.py --items 88, seeds 53 and 59, and seed 53 with --hesitate 0.8) no item changed,
    # the gate drops whole sentences there; the eval's clips are reported in the README (Noise), not tuned on.
    lend_within_s: float | None = 2.0

    def __post_init__(self):
        if self.within_s < 0:
            raise ValueError(f"ContextOptions.within_s must be >= 0 seconds, got {self.within_s}")
        if self.switch_prob is not None and not 0 < self.switch_prob <= 1:
            raise ValueError(f"ContextOptions.switch_prob must be in (0, 1] or None, got {self.switch_prob}")
        if self.joint_max_cost < 0:
            raise ValueError(f"ContextOptions.joint_max_cost must be >= 0 edits per word, got {self.joint_max_cost}")
        if self.joint_min_words_per_s < 0:
            raise ValueError(f"ContextOptions.joint_min_words_per_s must be >= 0, got {self.joint_min_words_per_s}")
        if not 0 < self.joint_max_s <= 30:
            raise ValueError(f"ContextOptions.joint_max_s must be in (0, 30] seconds (one Whisper window), "
                             f"got {self.joint_max_s}")
        if not 0 <= self.joint_min_s < self.joint_max_s:
            raise ValueError(f"ContextOptions.joint_min_s must be >= 0 and below joint_max_s ({self.joint_max_s} s), "
                             f"got {self.joint_min_s}")
        if self.lend_within_s is not None and not 0 < self.lend_within_s <= self.within_s:
            raise ValueError(f"ContextOptions.lend_within_s must be in (0, within_s] ({self.within_s} s) or None, "
                             f"got {self.lend_within_s}")


@dataclass(frozen=True)
class KeepLanguage:
    """A language chooser for :meth:`Asr.transcribe`: ``previous`` unless the detection is sure."""

    previous: str
    switch_prob: float

    def __call__(self, detected: str, probability: float) -> str:
        return detected if detected == self.previous or probability >= self.switch_prob else self.previous


@dataclass(frozen=True)
class AsrContext:
    """What the previous utterance lends to the decode of this one (nothing when it is too old)."""

    language: KeepLanguage | None = None
    prompt: Prompt | None = None
    follows: bool = False  # the utterance continues one heard within ``within_s`` (a hesitation, not babble)
    # Joint decoding (ContextOptions.joint): the previous utterance's first capture sample, its text and
    # language. None: decode the utterance on its own.
    joint: "Known | None" = None
    # ContextOptions.lend_within_s: the first capture sample of an utterance the unsure gate dropped just
    # before this one (its audio is lent to this one's decode); None: none.
    lent: int | None = None

    def transcribe_kwargs(self, source: str | None, languages: tuple[str, ...] | None = None) -> dict:
        """Keywords for ``Asr.transcribe``: ``language`` (the given source wins), ``prompt`` if any, and
        the ``languages`` detection chooses among (when it detects)."""
        kw: dict = {"language": source if source is not None else self.language}
        if self.prompt is not None:
            kw["prompt"] = self.prompt
        if source is None and languages is not None:
            kw["languages"] = languages
        return kw


NONE = AsrContext()


class Known(NamedTuple):
    """The previous utterance, for joint decoding: where its audio starts, what it said, in which language."""

    start_sample: int
    text: str
    lang: str


class Context:
    """The last final utterance's end, language and text (see the module docstring)."""

    def __init__(self, options: ContextOptions = ContextOptions()):
        self.options = options
        # (end sample, language, text, start sample) of the last two final utterances: the latest is the one
        # being finished while its source caption is still decoded; the one before is its context.
        self._heard: list[tuple[int, str, str, int | None]] = []
        self._dropped: tuple[int, int] | None = None  # (start, end) of the last utterance the unsure gate dropped

    def remember(self, end_sample: int, lang: str, text: str, start_sample: int | None = None) -> None:
        """An utterance ending at capture sample ``end_sample`` (starting at ``start_sample``, if known)
        was heard as ``text`` in ``lang`` (``text`` may be "" while the source transcript is pending: the
        language still counts; the same ``end_sample`` again replaces it)."""
        if not lang:
            return
        if self._heard and self._heard[-1][0] == end_sample:
            self._heard.pop()
        self._heard = [*self._heard[-1:], (end_sample, lang, text.strip(), start_sample)]

    def dropped(self, start_sample: int, end_sample: int) -> None:
        """The unsure gate dropped the utterance [start_sample, end_sample): Whisper wrote words, too unsure to
        say them (see ``ContextOptions.lend_within_s``)."""
        self._dropped = (start_sample, end_sample)

    def forget(self) -> None:
        self._heard = []
        self._dropped = None

    def at(self, start_sample: int) -> AsrContext:
        """The context for an utterance that starts at capture sample ``start_sample``: the latest
        utterance that ended before it, if it ended at most ``within_s`` earlier."""
        o = self.options
        before = [h for h in self._heard if h[0] <= start_sample]
        if not before or start_sample - before[-1][0] > o.within_s * SAMPLE_RATE:
            return self._lent(start_sample)
        _, lang, text, start = before[-1]
        language = None if o.switch_prob is None else KeepLanguage(lang, o.switch_prob)
        prompt = Prompt(text, lang) if o.prompt and text else None
        joint = Known(start, text, lang) if o.joint and text and start is not None else None
        return AsrContext(language, prompt, follows=True, joint=joint)

    def _lent(self, start_sample: int) -> AsrContext:
        """No final utterance within ``within_s``: the context lends the dropped utterance that ended at most
        ``lend_within_s`` before ``start_sample``, if any (a final one after it would be within ``within_s``)."""
        o, d = self.options, self._dropped
        if (o.lend_within_s is None or d is None or not d[1] <= start_sample
                or start_sample - d[1] > o.lend_within_s * SAMPLE_RATE):
            return NONE
        return AsrContext(lent=d[0])
