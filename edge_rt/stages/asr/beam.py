"""Beam search over the one-step Whisper decoder, as OpenAI Whisper's ``BeamSearchDecoder``.

A pack's decoder takes ``beams`` sequences per step (:mod:`edge_rt.build.export.whisper_graphs`): the
search binds it once more for the whole beam (:class:`BeamStep`: one cache row per hypothesis, the
window's cross-attention K/V shared), so a step is one run that reads the weights once for every
hypothesis; after each step the rows are reordered to follow the hypotheses kept (only the positions
after the prompt, where they differ). A decoder of an older pack takes one sequence per call: then a beam
of ``size`` hypotheses costs ``size`` decoder runs per step, and each hypothesis's keys and values
after the prompt live in :class:`BeamCache` (one slot per step and beam, allocated once), copied into
the bound cache before its step where its history differs from what the cache holds.

Ranking is Whisper's with ``length_penalty=None``: the finished hypothesis with the highest
log-probability per text token (CTranslate2's, which faster-whisper calls, divides by the length too).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from edge_rt.errors import EdgeRtError
from edge_rt.stages.asr.decoding import DecodeStopped, WhisperInference, is_timestamp, log_softmax, repeated_tail

__all__ = ["BeamCache", "BeamResult", "BeamSearch", "BeamStep", "BeamUnsupportedError", "batched_beam_search",
           "beam_search"]

_SHARED: "weakref.WeakKeyDictionary[WhisperInference, dict]" = weakref.WeakKeyDictionary()
_STEPS: "weakref.WeakKeyDictionary[WhisperInference, dict]" = weakref.WeakKeyDictionary()


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


class BeamStep:
    """The decoder bound for ``size`` sequences at once: one self-attention cache row per hypothesis.

    ``self_k`` [L, size, H, dh, 448] / ``self_v`` [L, size, H, 448, dh] are allocated once per beam width
    and shared by every window bucket's binding (bound per bucket on first use, with that bucket's cross
    K/V, batch 1, which every row reads). :meth:`begin` copies the prompt's keys and values from the
    greedy cache into every row; :meth:`run` feeds one token per row at one position and writes this
    step's keys and values into the rows; :meth:`reorder` makes each row hold its parent's history.
    """

    def __init__(self, inference: WhisperInference, size: int):
        if inference.device_cache or not inference.beams:
            raise ValueError("BeamStep needs a host-cache decoder with a `beams` dimension")
        self.inference, self.size = inference, size
        L, _, H, dh, T = inference.self_k.shape
        self.self_k = np.zeros((L, size, H, dh, T), np.float32)
        self.self_v = np.zeros((L, size, H, T, dh), np.float32)
        self._tokens = np.zeros((size, 1), np.int64)
        self._offset = np.zeros((1,), np.int64)
        self._logits = np.zeros((size, inference.n_vocab), np.float32)
        self._new_k = np.zeros((L, size, H, dh), np.float32)
        self._new_v = np.zeros_like(self._new_k)
        self._bound: dict[int, object] = {}  # frames -> the decoder bound for this beam

    @classmethod
    def shared(cls, inference: WhisperInference, size: int) -> "BeamStep":
        """The beam step of ``inference`` for ``size`` (one per engine pair and width, as :meth:`BeamCache.shared`)."""
        steps = _STEPS.setdefault(inference, {})
        if size not in steps:
            steps[size] = cls(inference, size)
        return steps[size]

    def _binding(self):
        frames = self.inference.frames
        if frames not in self._bound:
            cross_k, cross_v = self.inference.cross(frames)
            feeds = {"tokens": self._tokens, "offset": self._offset}
            for i in range(self.self_k.shape[0]):  # per-layer views are contiguous: bound in place
                feeds[f"self_k_{i}"] = self.self_k[i]
                feeds[f"self_v_{i}"] = self.self_v[i]
                feeds[f"cross_k_{i}"] = cross_k[i]
                feeds[f"cross_v_{i}"] = cross_v[i]
            self._bound[frames] = self.inference.decoder.bind(
                feeds, {"logits": self._logits, "new_k": self._new_k, "new_v": self._new_v})
        return self._bound[frames]

    def begin(self, start: int) -> None:
        """A new search after a prompt of ``start`` positions (in the greedy cache): every row gets it."""
        self.self_k[..., :start] = self.inference.self_k[..., :start]
        self.self_v[:, :, :, :start] = self.inference.self_v[:, :, :, :start]

    def run(self, tokens: Sequence[int], offset: int) -> np.ndarray:
        """Feed ``tokens[r]`` to row ``r`` (fewer than ``size``: the last rows repeat the first token) at
        position ``offset``; returns float32 logits [size, n_vocab] (a view, reused)."""
        self._tokens[: len(tokens), 0] = tokens
        self._tokens[len(tokens):, 0] = tokens[0]
        self._offset[0] = offset
        self._binding().run()
        self.self_k[..., offset] = self._new_k
        self.self_v[:, :, :, offset, :] = self._new_v
        return self._logits

    def reorder(self, parents: Sequence[int], start: int, end: int) -> None:
        """Row ``k`` takes row ``parents[k]``'s keys and values at positions ``start .. end - 1``."""
        if end <= start or list(parents) == list(range(len(parents))):
            return
        rows = np.asarray(parents, np.int64)
        n = len(rows)
        self.self_k[:, :n, :, :, start:end] = self.self_k[:, rows, :, :, start:end]
        self.self_v[:, :n, :, start:end] = self.self_v[:, rows, :, start:end]


@dataclass(frozen=True)
class _Hypothesis:
    tokens: tuple[int, ...]
    chain: tuple[int, ...]  # BeamCache slot of each fed token
    logprob: float  # every pick's (the ranking)
    end_mark: float  # P(final mark) at its last mark, NaN before one
    text_logprob: float = 0.0  # the text tokens' and <|endoftext|>'s only (timestamps left out), as greedy's sum


@dataclass(frozen=True)
class BeamResult:
    tokens: tuple[int, ...]
    sum_logprob: float  # over the text tokens, and <|endoftext|> when it ended (not over timestamps)
    end_mark_prob: float  # NaN when it did not end with <|endoftext|>


@dataclass(frozen=True)
class BeamSearch:
    """The :class:`~edge_rt.stages.asr.decoding.TextSearch` of a :class:`DecodingTask` with a beam."""

    size: int
    cache: BeamCache | None  # the one-sequence decoder's per-hypothesis K/V; None: the decoder takes the beam

    @classmethod
    def of(cls, inference: WhisperInference, size: int, max_new_tokens: int) -> "BeamSearch":
        """The search for ``inference``: batched when its decoder takes the beam, else one run per hypothesis."""
        if inference.beams and not inference.device_cache:
            return cls(size, None)
        return cls(size, BeamCache.shared(inference, size, max_new_tokens))

    def run(self, task, logits: np.ndarray, start: int, stop: Callable[[], bool] | None):
        kw = dict(size=self.size, eot=task.vocab.eot, marks=np.asarray(task.vocab.final_marks, np.int64),
                  filters=task.filters, max_new_tokens=task.max_new_tokens, stop=stop, stamps=task.stamps)
        if self.cache is None:
            r = batched_beam_search(BeamStep.shared(task.inference, self.size), logits, start, **kw)
        else:
            r = beam_search(task.inference, self.cache, logits, start, **kw)
        return r.tokens, r.sum_logprob, r.end_mark_prob


def beam_search(inference: WhisperInference, cache: BeamCache, logits: np.ndarray, start: int, *, size: int,
                eot: int, marks: np.ndarray, filters: Sequence, max_new_tokens: int,
                stop: Callable[[], bool] | None = None, stamps: int | None = None) -> BeamResult:
    """Decode after a prompt whose last step gave ``logits``; text tokens go at ``start ..``.

    At each step every live hypothesis proposes its ``size + 1`` best tokens; the ``size`` best
    continuations by total log-probability live on, and candidates ending in ``<|endoftext|>`` ranked
    above the last kept one finish, until ``size`` have finished (Whisper's patience 1) or the token
    limit. A hypothesis whose tail repeats (:func:`repeated_tail`) finishes with one copy.

    One decoder run per hypothesis and step (a one-sequence decoder); :func:`batched_beam_search` is the
    same search with one run per step.
    """
    cache.reset()
    live = [_Hypothesis((), (), 0.0, float("nan"))]
    finished: list[_Hypothesis] = []
    for n in range(max_new_tokens):
        rows = []
        for j, h in enumerate(live):
            if n:
                if stop is not None and stop():
                    raise DecodeStopped(f"stopped after {n} tokens")
                cache.load(start, h.chain)
                logits = inference.step(h.tokens[-1], start + n - 1).copy()  # the step's buffer is reused
                cache.keep(n - 1, j)
            rows.append(logits)
        kept, done = _select(live, rows, size=size, eot=eot, marks=marks, filters=filters, stamps=stamps)
        finished += done[: max(size - len(finished), 0)]
        if len(finished) >= size or not kept:
            break
        live = [replace(h, chain=h.chain + (j,) if n else ()) for h, j in kept]
    else:  # the token limit: the live hypotheses compete too, with no verdict on their end
        finished += [replace(h, end_mark=float("nan")) for h in live]
    return _best(finished)


def batched_beam_search(step: BeamStep, logits: np.ndarray, start: int, *, size: int, eot: int, marks: np.ndarray,
                        filters: Sequence, max_new_tokens: int, stop: Callable[[], bool] | None = None,
                        stamps: int | None = None) -> BeamResult:
    """:func:`beam_search` with every live hypothesis in one decoder run per step (``step``: the decoder bound
    for the beam). The same proposals and choices; the scores differ only by the batched run's rounding."""
    if size > step.size:
        raise ValueError(f"a beam of {size} on a step bound for {step.size}")
    step.begin(start)
    live = [_Hypothesis((), (), 0.0, float("nan"))]
    finished: list[_Hypothesis] = []
    for n in range(max_new_tokens):
        if n:
            if stop is not None and stop():
                raise DecodeStopped(f"stopped after {n} tokens")
            rows = step.run([h.tokens[-1] for h in live], start + n - 1)[: len(live)]
        else:
            rows = logits[None]
        kept, done = _select(live, rows, size=size, eot=eot, marks=marks, filters=filters, stamps=stamps)
        finished += done[: max(size - len(finished), 0)]
        if len(finished) >= size or not kept:
            break
        step.reorder([j for _, j in kept], start, start + n)  # row k continues parent j's history
        live = [h for h, _ in kept]
    else:
        finished += [replace(h, end_mark=float("nan")) for h in live]
    return _best(finished)


def _select(live: Sequence[_Hypothesis], rows, *, size: int, eot: int, marks: np.ndarray, filters: Sequence,
            stamps: int | None = None) -> tuple[list[tuple[_Hypothesis, int]], list[_Hypothesis]]:
    """One step's choice: ``rows[j]`` are live[j]'s logits after its tokens (filtered here, in place).
    Returns the kept continuations with their parent's index, and the hypotheses that finished."""
    mark_ids = set(int(m) for m in marks)
    proposals = []
    for j, (h, row) in enumerate(zip(live, rows)):
        for f in filters:
            f.apply(row, h.tokens)
        logp = log_softmax(row)
        mark = float(np.exp(logp[marks]).sum()) if len(marks) else float("nan")
        top = np.argpartition(logp, -(size + 1))[-(size + 1):]
        proposals += [(h.logprob + float(logp[t]), j, int(t), mark, float(logp[t])) for t in top]
    proposals.sort(key=lambda p: -p[0])
    kept: list[tuple[_Hypothesis, int]] = []
    done: list[_Hypothesis] = []
    for score, j, token, mark, logp_t in proposals:
        h = live[j]
        text_score = h.text_logprob + (0.0 if is_timestamp(token, stamps) else logp_t)
        # The text's end verdict: at a final mark, else at the pick after the last text token (<|endoftext|>,
        # or a timestamp closing its segment).
        closes = bool(h.tokens) and not is_timestamp(h.tokens[-1], stamps) and h.tokens[-1] not in mark_ids
        end = mark if token in mark_ids or ((token == eot or is_timestamp(token, stamps)) and closes) else h.end_mark
        if token == eot:
            has_text = any(not is_timestamp(t, stamps) for t in h.tokens)
            done.append(_Hypothesis(h.tokens, h.chain, score, end if has_text else float("nan"), text_score))
            continue
        tokens = h.tokens + (token,)
        cut = repeated_tail(tokens)
        if cut:  # a loop: one copy, finished without a verdict on its end
            done.append(_Hypothesis(tokens[:-cut], h.chain, score, float("nan"), text_score))
            continue
        kept.append((_Hypothesis(tokens, h.chain, score, end, text_score), j))
        if len(kept) == size:
            break
    return kept, done


def _best(finished: Sequence[_Hypothesis]) -> BeamResult:
    best = max(finished, key=lambda h: h.logprob / max(len(h.tokens), 1))
    return BeamResult(best.tokens, best.text_logprob, best.end_mark)
