"""Translated speech on its way to the sink: a queue of clauses, per utterance, handed over as the sink takes it.

The sink back-pressures (``write`` returns how much it accepted), so clauses wait
here; the first sample of each utterance is marked right before it is written, and its trace gets
``first_output`` when its first *sounding* sample (over ``OnsetOptions.below_dbfs``, onset.py) is
played: the mark's time plus the samples before it, played at the sink's rate. The near-silence a
synthesizer puts before that sound is not queued (but ``keep_ms`` of it). The loop's
overload policy reads :meth:`SpeechQueue.backlog_s` and may drop the oldest
queued utterance; a person talking over the speech (barge-in, :meth:`SpeechQueue.barge_in`) may duck,
pause or stop it, when the loop's options say so.
"""

from __future__ import annotations

import collections

import numpy as np

from edge_rt.audio.sinks import Sink
from edge_rt.loop.onset import OnsetOptions, first_sound
from edge_rt.loop.trace import UtteranceTrace

__all__ = ["BARGE_IN", "SpeechQueue"]

# What a person talking over the translated speech does to it; "resay" holds it as "pause" does, and the loop
# then either plays the rest or drops it for a translation of the whole sentence (LoopOptions.barge_in).
BARGE_IN = ("duck", "pause", "stop", "continue", "resay")


class SpeechQueue:
    def __init__(self, sink: Sink, onset: OnsetOptions | None = None):
        self.sink = sink
        self.onset = onset  # None: a first clause is queued from its first sample, silent or not
        # what counts as heard (first_output), whether a lead is played or not
        self._below_dbfs = (onset or OnsetOptions()).below_dbfs
        # [trace, samples, mark]: mark, for an utterance's first clause until it is written, the samples from its
        # start to its first sound (None: no mark)
        self._items: collections.deque[list] = collections.deque()
        self._queued = 0  # samples waiting here (not yet accepted by the sink)
        self._marked: collections.deque[UtteranceTrace] = collections.deque()  # first sample in the sink, unplayed

    def __bool__(self) -> bool:
        return bool(self._items)

    def add(self, trace: UtteranceTrace, samples: np.ndarray, first: bool) -> None:
        """Queue one clause of ``trace``'s speech (float32 at the sink's rate); ``first``: its first clause, queued
        from where it starts to sound (``onset``), its trace stamped when its first sounding sample is played."""
        mark = None  # samples from the start of this clause's queued audio to its first sound
        if first:
            sound = first_sound(samples, self._below_dbfs)
            start = max(0, sound - self.onset.keep_samples(self.sink.rate)) if self.onset is not None else 0
            samples, mark = samples[start:], sound - start
        self._items.append([trace, samples, mark])
        self._queued += len(samples)

    def push(self) -> None:
        """Hand the sink as much as it accepts now."""
        while self._items:
            item = self._items[0]
            tr, head, mark = item
            if mark is not None:  # its first sample is the next one the sink takes; its sound, ``mark`` later
                delay_ns = mark * 1_000_000_000 // self.sink.rate
                self.sink.mark(lambda t_ns, tr=tr, d=delay_ns: tr.stamp("first_output", t_ns + d))
                while self._marked and "first_output" in self._marked[0].t_ns:
                    self._marked.popleft()  # heard already
                self._marked.append(tr)
                item[2] = None
            n = self.sink.write(head)
            self._queued -= n
            if n == len(head):
                self._items.popleft()
            else:
                item[1] = head[n:]  # back-pressure: offer the rest later
                return

    def playing(self) -> bool:
        """Speech is queued here or not yet played by the sink."""
        return bool(self._items) or self.sink.pending() > 0

    def barge_in(self, policy: str) -> list[UtteranceTrace]:
        """Someone started talking over the speech: ``duck`` it, ``pause`` it (silence until
        :meth:`resume`, then the rest: nothing is lost; ``resay`` too: the loop may :meth:`barge_in` ``stop`` before
        it resumes), ``stop`` it, or ``continue``.

        Returns the utterances whose speech was stopped before any of it was heard. Sinks that cannot
        duck, hold or flush (a file timeline) play on.
        """
        if policy in ("duck", "pause", "resay"):
            act = getattr(self.sink, "duck" if policy == "duck" else "hold", None)
            if act is not None:
                act(True)
            return []
        if policy != "stop":
            return []
        flush = getattr(self.sink, "flush", None)
        if flush is None:
            return []
        unheard = []  # in the order they would have played; the sink's unplayed first samples go too
        for tr in [*self._marked, *(item[0] for item in self._items)]:
            if "first_output" not in tr.t_ns and all(tr is not u for u in unheard):
                unheard.append(tr)
        self._marked.clear()
        self._items.clear()
        self._queued = 0
        flush()
        return unheard

    def resume(self) -> None:
        """The person stopped talking: full level again (after a duck), the rest played (after a pause)."""
        for name in ("duck", "hold"):
            act = getattr(self.sink, name, None)
            if act is not None:
                act(False)

    def backlog_s(self) -> float:
        """Seconds of speech synthesized but not played yet (in the sink and here)."""
        return (self.sink.pending() + self._queued) / self.sink.rate

    def drop_oldest(self) -> UtteranceTrace | None:
        """Drop the oldest utterance's unplayed speech if another one waits behind it; returns its trace."""
        if not self._items or self._items[0][0] is self._items[-1][0]:
            return None
        oldest = self._items[0][0]
        while self._items[0][0] is oldest:
            self._queued -= len(self._items.popleft()[1])
        return oldest
