"""What one utterance hands to the next: its language and its text.

A pause that ends an utterance does not end the conversation. When the next utterance starts
within ``within_s`` of the previous one's end:

* **language carry-over**: Whisper's language detection on a short fragment is often wrong
  ("However" heard as Chinese, an English fragment as Latin); the previous utterance's language
  is kept unless the detection is sure (probability at least ``switch_prob``);
* **context**: Whisper may be conditioned on the previous final text (``<|startofprev|>``, as
  faster-whisper's ``condition_on_previous_text``), when the new utterance is in the same language.

Pure bookkeeping over sample indices; the loop calls :meth:`Context.remember` when an utterance's
final text is known and :meth:`Context.at` before decoding the next.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_rt.stages.asr.whisper import Prompt
from edge_rt.units import SAMPLE_RATE

__all__ = ["AsrContext", "Context", "ContextOptions", "KeepLanguage"]


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

    def __post_init__(self):
        if self.within_s < 0:
            raise ValueError(f"ContextOptions.within_s must be >= 0 seconds, got {self.within_s}")
        if self.switch_prob is not None and not 0 < self.switch_prob <= 1:
            raise ValueError(f"ContextOptions.switch_prob must be in (0, 1] or None, got {self.switch_prob}")


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


class Context:
    """The last final utterance's end, language and text (see the module docstring)."""

    def __init__(self, options: ContextOptions = ContextOptions()):
        self.options = options
        # (end sample, language, text) of the last two final utterances: the latest is the one being
        # finished while its source caption is still decoded; the one before is its context.
        self._heard: list[tuple[int, str, str]] = []

    def remember(self, end_sample: int, lang: str, text: str) -> None:
        """An utterance ending at capture sample ``end_sample`` was heard as ``text`` in ``lang``
        (``text`` may be "" while the source transcript is pending: the language still counts; the
        same ``end_sample`` again replaces it)."""
        if not lang:
            return
        if self._heard and self._heard[-1][0] == end_sample:
            self._heard.pop()
        self._heard = [*self._heard[-1:], (end_sample, lang, text.strip())]

    def forget(self) -> None:
        self._heard = []

    def at(self, start_sample: int) -> AsrContext:
        """The context for an utterance that starts at capture sample ``start_sample``: the latest
        utterance that ended before it, if it ended at most ``within_s`` earlier."""
        o = self.options
        before = [h for h in self._heard if h[0] <= start_sample]
        if not before or start_sample - before[-1][0] > o.within_s * SAMPLE_RATE:
            return NONE
        _, lang, text = before[-1]
        language = None if o.switch_prob is None else KeepLanguage(lang, o.switch_prob)
        prompt = Prompt(text, lang) if o.prompt and text else None
        return AsrContext(language, prompt, follows=True)
