"""The utterance state machine: VAD probabilities in, start/end events out.

Pure logic over numbers (one call per 32 ms frame), so it is tested without
audio. Time is the capture ring's sample index.

* **Adaptive threshold**: the noise floor is tracked as the running mean and
  deviation of the VAD probability on non-speech frames; speech must exceed
  ``max(base_threshold, mu + alpha * sigma)`` (capped at ``max_threshold``),
  so steady noise that lifts the VAD's output does not open utterances.
* **Hangover**: an utterance ends after ``hangover_ms`` of frames below the
  threshold minus ``neg_offset``; the loop's turn policy may :meth:`~Endpointer.hold` one pause
  longer (a sentence judged incomplete) or shorter, or end it now (:meth:`~Endpointer.force_end`).
* **Pre-roll**: an utterance starts ``preroll_ms`` before its first speech frame
  so the first phoneme is not cut.
* **Post-roll** (``postroll_ms``, used by the loop; off by default): the audio Whisper decodes goes on that
  long after the last speech frame, so a soft last phoneme the VAD calls silence is not cut; the utterance's
  end (the events' sample, the turn latency's zero) stays the last speech frame's.
* **Maximum length**: an utterance longer than ``max_utterance_s`` is split at
  the least speech-like frame of its last ``split_search_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from edge_rt.units import SAMPLE_RATE, VAD_FRAME, VAD_FRAME_MS


@dataclass(frozen=True)
class EndpointOptions:
    base_threshold: float = 0.5  # speech probability that opens an utterance in quiet conditions
    max_threshold: float = 0.85  # the adaptive threshold never exceeds this
    alpha: float = 3.0  # threshold = mu + alpha * sigma of non-speech probabilities
    noise_window_s: float = 5.0  # time constant of the noise-floor statistics
    neg_offset: float = 0.15  # speech continues while p >= threshold - neg_offset
    start_frames: int = 2  # consecutive speech frames that open an utterance (64 ms)
    hangover_ms: int = 288  # silence that ends an utterance (9 frames)
    preroll_ms: int = 192  # audio kept before the first speech frame
    # Audio decoded after the last speech frame of an utterance that ends at a pause (not at a max-length split,
    # where the next utterance starts). Silero gives a word's soft end (a final /s/) a low probability, and Whisper
    # given audio that stops there drops it: "my fellow American" for "Americans" (en_jfk); faster-whisper pads
    # its speech chunks by 400 ms (VadOptions.speech_pad_ms). **Off (0) by default**: 64 ms (what the speculation
    # at a pause has heard, so it adds no wait) lowered live English WER 6.98 -> 6.05 % and talk-over 12 -> 10 of
    # the 33 clips in one interleaved run (tools/loop_ab.py --vary postroll_ms=0,64) and WER 33.5 -> 31.9 % on
    # 120 generated sentences (tools/tune_redecode.py, seeds 53 and 59), but it moves Whisper's end-mark
    # probability, the turn policy's evidence: at the spliced hesitation of tests/loop/test_loop.py 0.49 -> 0.64,
    # and the hesitation ends the utterance. Recorded with it (tools/tune_turn.py --postroll-ms 64), the held-out
    # half ends 11 of 17 spliced hesitations against 7 at the defaults (8 against 5-6 at a higher mark_incomplete;
    # the tuning half: 2/15 against 3/15): audio that stops at the last speech frame is itself a sign the sentence
    # goes on. See README "A word's soft end". Where the speculation's evidence holds a pause anyway, the loop decodes
    # it once more with a tail of its own, without telling the policy (LoopOptions.held_postroll_ms).
    postroll_ms: int = 0
    max_utterance_s: float = 28.0  # split longer speech (fits Whisper's 30 s window with pre-roll)
    split_search_s: float = 4.0  # where to look for the quietest point when splitting

    def __post_init__(self):
        if not 0.0 < self.base_threshold <= self.max_threshold < 1.0:
            raise ValueError("need 0 < base_threshold <= max_threshold < 1, got "
                             f"{self.base_threshold} and {self.max_threshold}")
        if self.hangover_ms < VAD_FRAME_MS:
            raise ValueError(f"hangover_ms must be at least one frame ({VAD_FRAME_MS} ms), got {self.hangover_ms}")
        if self.split_search_s >= self.max_utterance_s:
            raise ValueError("split_search_s must be shorter than max_utterance_s")
        if self.start_frames < 1:
            raise ValueError(f"start_frames must be >= 1, got {self.start_frames}")
        if not 0 <= self.postroll_ms <= 1000:
            raise ValueError(f"postroll_ms must be 0-1000 ms of audio after the last speech frame, got {self.postroll_ms}")

    @property
    def hangover_frames(self) -> int:
        return max(1, math.ceil(self.hangover_ms / VAD_FRAME_MS))

    @property
    def preroll_samples(self) -> int:
        return int(self.preroll_ms * SAMPLE_RATE / 1000)

    @property
    def postroll_samples(self) -> int:
        return int(self.postroll_ms * SAMPLE_RATE / 1000)

    @property
    def max_frames(self) -> int:
        return int(self.max_utterance_s * 1000 / VAD_FRAME_MS)

    @property
    def search_frames(self) -> int:
        return int(self.split_search_s * 1000 / VAD_FRAME_MS)


class Event(NamedTuple):
    kind: str  # "start" | "end"
    sample: int  # start: first sample of the utterance (pre-roll included); end: one past its last speech sample
    # end: "silence" (the hangover ran out) | "max_length" | "flush" | a reason given to hold() or force_end()
    # by the loop's turn policy ("complete", "hangover", "max_pause")
    reason: str = ""


class Endpointer:
    """Feed one VAD probability per frame; get utterance start/end events.

    ``frame_index`` ``i`` covers samples ``[512 i, 512 (i + 1))``. No
    allocation per frame beyond the small event tuples it returns.
    """

    def __init__(self, options: EndpointOptions = EndpointOptions()):
        self.options = options
        self._decay = 1.0 - 1.0 / max(1.0, options.noise_window_s * 1000 / VAD_FRAME_MS)
        self.reset()

    def reset(self) -> None:
        self.in_speech = False
        self._mu = 0.05  # prior: a quiet room
        self._var = 0.05**2
        self._run = 0  # consecutive frames above threshold while silent
        self._silence = 0  # consecutive frames below the continuation level while in speech
        self._hold: tuple[int, str] | None = None  # (silence frames, reason) that end the current pause
        self._start_frame = 0
        self._last_speech_frame = -1
        self._floor = 0  # end sample of the previous utterance: a pre-roll never reaches back into it
        # probabilities of the current utterance's recent frames (for max-length splits),
        # a preallocated circular window indexed by frame number
        self._recent = np.ones(self.options.search_frames, dtype=np.float32)

    @property
    def threshold(self) -> float:
        o = self.options
        return min(o.max_threshold, max(o.base_threshold, self._mu + o.alpha * math.sqrt(self._var)))

    def _track_noise(self, p: float) -> None:
        d = self._decay
        delta = p - self._mu
        self._mu += (1 - d) * delta
        self._var = d * (self._var + (1 - d) * delta * delta)

    def push(self, frame_index: int, p: float) -> list[Event]:
        o = self.options
        thr = self.threshold
        events: list[Event] = []
        if not self.in_speech:
            if p >= thr:
                self._run += 1
                if self._run >= o.start_frames:
                    first = frame_index - self._run + 1
                    self._open(first)
                    events.append(Event("start", max(self._floor, first * VAD_FRAME - o.preroll_samples)))
            else:
                self._run = 0
                self._track_noise(p)
            return events
        self._remember(frame_index, p)
        if p >= thr - o.neg_offset:
            self._silence = 0
            self._hold = None
            self._last_speech_frame = frame_index
        else:
            self._silence += 1
            frames, reason = self._hold or (o.hangover_frames, "silence")
            if self._silence >= frames:
                end = (self._last_speech_frame + 1) * VAD_FRAME
                events.append(Event("end", end, reason))
                self._close(end)
                return events
        if frame_index - self._start_frame + 1 >= o.max_frames:
            cut = self._quietest(frame_index)
            events.append(Event("end", cut * VAD_FRAME, "max_length"))
            events.append(Event("start", cut * VAD_FRAME))
            self._open(cut)
        return events

    @property
    def silence_frames(self) -> int:
        """Consecutive frames below the continuation level inside the current utterance (0 outside)."""
        return self._silence if self.in_speech else 0

    @property
    def previous_end(self) -> int:
        """One past the last speech sample of the previous utterance (0 before any): no start reaches back into it."""
        return self._floor

    @property
    def speech_end_sample(self) -> int:
        """One past the last speech sample of the current utterance."""
        return (self._last_speech_frame + 1) * VAD_FRAME

    def hold(self, frames: int, reason: str) -> None:
        """End the current pause after ``frames`` silent frames (instead of the hangover), with ``reason``.

        Holds for this pause only: speech resuming, or the utterance ending, restores the hangover.
        Call it while :attr:`silence_frames` > 0; ``frames`` at or below the silence so far ends the
        utterance at the next silent frame (use :meth:`force_end` to end it now).
        """
        if frames < 1:
            raise ValueError(f"hold needs at least one frame, got {frames}")
        if self.in_speech:
            self._hold = (frames, reason)

    def force_end(self, reason: str = "complete") -> list[Event]:
        """End the open utterance now, at its last speech frame (e.g. the sentence is clearly complete)."""
        if not self.in_speech:
            return []
        end = self.speech_end_sample
        self._close(end)
        return [Event("end", end, reason)]

    def flush(self, frame_index: int) -> list[Event]:
        """End an open utterance (end of stream)."""
        return self.force_end("flush")

    def _open(self, first_frame: int) -> None:
        self.in_speech = True
        self._start_frame = first_frame
        self._last_speech_frame = first_frame
        self._silence = 0
        self._hold = None
        self._run = 0
        self._recent[:] = 1.0

    def _close(self, end_sample: int) -> None:
        self._floor = end_sample
        self.in_speech = False
        self._silence = 0
        self._hold = None
        self._run = 0

    def _remember(self, frame_index: int, p: float) -> None:
        self._recent[frame_index % len(self._recent)] = p

    def _quietest(self, now: int) -> int:
        """Frame index of the lowest probability in the search window ending at ``now`` (latest on ties)."""
        n = len(self._recent)
        # window frames now-n+1 .. now, laid out circularly
        order = (np.arange(now - n + 1, now + 1)) % n
        k = int(np.argmin(self._recent[order][::-1]))
        return now - k
