"""Beam search over the one-step Whisper decoder, as OpenAI Whisper's ``BeamSearchDecoder``.

The decoder graph takes one token of one sequence per call (batch 1, static shapes), so a beam of
``size`` hypotheses costs ``size`` decoder runs per step. Each hypothesis's self-attention keys and
values after the prompt live in :class:`BeamCache` (one slot per step and beam, allocated once);
before a hypothesis's step the positions where its history differs from what the bound cache holds
are copied in, so beams that share a prefix copy only their tails.

Ranking is Whisper's with ``length_penalty=None``: the finished hypothesis with the highest
log-probability per text token (CTranslate2's, which faster-whisper calls, divides by the length too).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from edge_rt.errors import EdgeRtError
from edge_rt.stages.asr.decoding import DecodeStopped, WhisperInference, log_softmax, repeated_tail

__all__ = ["BeamCache", "BeamResult", "BeamSearch", "BeamUnsupportedError", "beam_search"]

_SHARED: "weakref.WeakKeyDictionary[WhisperInference, dict]" = weakref.WeakKeyDictionary()


class BeamUnsupportedError(EdgeRtError, ValueError):
    """Beam search asked of a decoder it cannot run on."""


class BeamCache:
    """Per-hypothesis self-attention K/V after the prompt, for the host-cache decoder.

    ``k[m, slot]`` / ``v[m, slot]`` hold what the decoder wrote at position ``start + m`` while it
    ran the hypothesis in ``slot`` at step ``m``; a hypothesis is the chain of slots it came through.
    """

    def __init__(self, inference: WhisperInference, size: int, steps: int):
        if inference.device_cache:
            raise BeamUnsupportedError(
                "beam search needs the Whisper decoder with host-side cache writes (ONNX Runtime); the device-cache "
                "decoder (TensorRT) keeps its cache where the host cannot copy it: use --beam 1 "
                "(AsrOptions.beam_size=1) on that backend, or --backend cpu")
        self.inference = inference
        L, _, H, dh, _ = inference.self_k.shape
        self.k = np.zeros((steps, size, L, H, dh), np.float32)
        self.v = np.zeros_like(self.k)
        self._loaded: list[int] = []  # the chain whose K/V the bound cache holds after ``start``

    @classmethod
    def shared(cls, inference: WhisperInference, size: int, steps: int) -> "BeamCache":
        """The cache of ``inference`` for this beam (one per engine pair, not one per :class:`Asr` view: a
        view made per loop would otherwise allocate its own ~28 MB)."""
        caches = _SHARED.setdefault(inference, {})
        if (size, steps) not in caches:
            caches[size, steps] = cls(inference, size, steps)
        return caches[size, steps]

    def reset(self) -> None:
        """A new decode: nothing after the prompt is known to be in the bound cache."""
        self._loaded = []

    def load(self, start: int, chain: Sequence[int]) -> None:
        """Make the bound cache hold ``chain``'s K/V at positions ``start ..``."""
        same = 0
        for a, b in zip(self._loaded, chain):
            if a != b:
                break
            same += 1
        if len(chain) > same:
            m = np.arange(same, len(chain))
            slots = np.asarray(chain[same:], np.int64)
            inf, end = self.inference, start + len(chain)
            inf.self_k[:, 0, :, :, start + same:end] = self.k[m, slots].transpose(1, 2, 3, 0)
            inf.self_v[:, 0, :, start + same:end, :] = self.v[m, slots].transpose(1, 2, 0, 3)
        self._loaded = list(chain)

    def keep(self, step: int, slot: int) -> None:
        """Record the K/V the decoder just wrote (at ``start + step``) as ``slot``'s at ``step``."""
        self.k[step, slot] = self.inference.new_k[:, 0]
        self.v[step, slot] = self.inference.new_v[:, 0]
        self._loaded.append(slot)


@dataclass(frozen=True)
class _Hypothesis:
    tokens: tuple[int, ...]
    chain: tuple[int, ...]  # BeamCache slot of each fed token
    logprob: float
    end_mark: float  # P(final mark) at its last mark, NaN before one


@dataclass(frozen=True)
class BeamResult:
    tokens: tuple[int, ...]
    sum_logprob: float  # <|endoftext|> included when it ended
    end_mark_prob: float  # NaN when it did not end with <|endoftext|>


@dataclass(frozen=True)
class BeamSearch:
    """The :class:`~edge_rt.stages.asr.decoding.TextSearch` of a :class:`DecodingTask` with a beam."""

    size: int
    cache: BeamCache

    def run(self, task, logits: np.ndarray, start: int, stop: Callable[[], bool] | None):
        r = beam_search(task.inference, self.cache, logits, start, size=self.size, eot=task.vocab.eot,
                        marks=np.asarray(task.vocab.final_marks, np.int64), filters=task.filters,
                        max_new_tokens=task.max_new_tokens, stop=stop)
        return r.tokens, r.sum_logprob, r.end_mark_prob


def beam_search(inference: WhisperInference, cache: BeamCache, logits: np.ndarray, start: int, *, size: int,
                eot: int, marks: np.ndarray, filters: Sequence, max_new_tokens: int,
                stop: Callable[[], bool] | None = None) -> BeamResult:
    """Decode after a prompt whose last step gave ``logits``; text tokens go at ``start ..``.

    At each step every live hypothesis proposes its ``size + 1`` best tokens; the ``size`` best
    continuations by total log-probability live on, and candidates ending in ``<|endoftext|>`` ranked
    above the last kept one finish, until ``size`` have finished (Whisper's patience 1) or the token
    limit. A hypothesis whose tail repeats (:func:`repeated_tail`) finishes with one copy.
    """
    mark_ids = set(int(m) for m in marks)
    cache.reset()
    live = [_Hypothesis((), (), 0.0, float("nan"))]
    finished: list[_Hypothesis] = []
    for n in range(max_new_tokens):
        proposals = []
        for j, h in enumerate(live):
            if n:
                if stop is not None and stop():
                    raise DecodeStopped(f"stopped after {n} tokens")
                cache.load(start, h.chain)
                logits = inference.step(h.tokens[-1], start + n - 1)
                cache.keep(n - 1, j)
            for f in filters:
                f.apply(logits, n)
            logp = log_softmax(logits)
            mark = float(np.exp(logp[marks]).sum()) if len(marks) else float("nan")
            top = np.argpartition(logp, -(size + 1))[-(size + 1):]
            proposals += [(h.logprob + float(logp[t]), j, int(t), mark) for t in top]
        proposals.sort(key=lambda p: -p[0])
        kept: list[_Hypothesis] = []
        new_finished: list[_Hypothesis] = []
        for score, j, token, mark in proposals:
            h = live[j]
            if token == eot:
                end = h.end_mark if h.tokens and h.tokens[-1] in mark_ids else mark
                new_finished.append(_Hypothesis(h.tokens, h.chain, score, end if h.tokens else float("nan")))
                continue
            tokens = h.tokens + (token,)
            cut = repeated_tail(tokens)
            if cut:  # a loop: one copy, finished without a verdict on its end
                new_finished.append(_Hypothesis(tokens[:-cut], h.chain, score, float("nan")))
                continue
            kept.append(_Hypothesis(tokens, h.chain + (j,) if n else (), score,
                                    mark if token in mark_ids else h.end_mark))
            if len(kept) == size:
                break
        finished += new_finished[: max(size - len(finished), 0)]
        if len(finished) >= size or not kept:
            break
        live = kept
    else:  # the token limit: the live hypotheses compete too, with no verdict on their end
        finished += [_Hypothesis(h.tokens, h.chain, h.logprob, float("nan")) for h in live]
    best = max(finished, key=lambda h: h.logprob / max(len(h.tokens), 1))
    return BeamResult(best.tokens, best.logprob, best.end_mark)
