"""Greedy Whisper decoding of one encoder window, from small strategy objects.

Modelled on OpenAI Whisper's ``decoding.py``: :class:`WhisperInference` runs the
graphs, :class:`LogitFilter` objects mask tokens, :class:`GreedyDecoder` picks one,
and :class:`DecodingTask` runs the few-line loop that ties them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from edge_rt.backends.base import Engine
from edge_rt.units import MAX_TEXT_CTX

DEVICE_CACHE_OUTPUT = "self_k_out_0"  # present only in a decoder that updates its own caches


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class WhisperInference:
    """The exported encoder and one-step decoder over buffers bound once per window bucket.

    Graph I/O is documented in :mod:`edge_rt.build.export.whisper_graphs`. For each
    encoder window (bucket) the mel input, the cross-attention K/V, the
    448-position self-attention cache, the logits and the new K/V are host
    buffers allocated the first time the bucket is used and bound to both
    engines (IOBinding), so :meth:`encode` and :meth:`step` allocate nothing:
    a step writes its new key/value into the cache in place. The buckets' cross K/V share
    one buffer (each the front of it): only the bucket encoded last can be decoded.

    A decoder with ``self_k_out_0`` among its outputs (``whisper_decoder_device.onnx``,
    :mod:`edge_rt.build.export.whisper_device`) updates the caches itself: they are bound
    ``device_resident`` (the backend carries each ``self_*_out_<i>`` into ``self_*_<i>``,
    on the device on a GPU), only ``logits`` is read back, and :meth:`step` writes nothing.
    Each bucket's binding then holds its own copy of the cache; that is safe because a
    window's decode writes every slot (from offset 0) before it reads it.

    Args:
        encoder, decoder: engines of ``whisper_encoder.onnx`` / ``whisper_decoder.onnx``
            (or ``whisper_decoder_device.onnx``).
        dims: the manifest's ``dims`` (``n_text_layer``, ``n_text_head``, ``n_text_state``, ``n_mels``, ``n_vocab``).
        beams: the decoder takes several sequences per step (its ``beams`` dimension, packs built since
            it exists): beam search binds it once more for the whole beam (:class:`~edge_rt.stages.asr.beam.BeamStep`).
    """

    def __init__(self, encoder: Engine, decoder: Engine, dims: Mapping[str, int], beams: bool = False):
        self.encoder, self.decoder = encoder, decoder
        self.beams = beams
        n_layer, heads = int(dims["n_text_layer"]), int(dims["n_text_head"])
        self.d_head = int(dims["n_text_state"]) // heads
        self.heads = heads
        self.n_layer = n_layer
        self.n_mels = int(dims["n_mels"])
        self.self_k = np.zeros((n_layer, 1, heads, self.d_head, MAX_TEXT_CTX), np.float32)  # keys transposed
        self.self_v = np.zeros((n_layer, 1, heads, MAX_TEXT_CTX, self.d_head), np.float32)
        self._token = np.zeros((1, 1), np.int64)
        self._offset = np.zeros((1,), np.int64)
        self.n_vocab = int(dims["n_vocab"])
        self._logits = np.zeros((1, self.n_vocab), np.float32)
        self._new_k = np.zeros((n_layer, 1, heads, self.d_head), np.float32)
        self._new_v = np.zeros((n_layer, 1, heads, self.d_head), np.float32)
        # The device contract: the graph returns the updated caches (allocated only then).
        self.device_cache = DEVICE_CACHE_OUTPUT in decoder.output_names
        if self.device_cache:
            self._k_out, self._v_out = np.zeros_like(self.self_k), np.zeros_like(self.self_v)
        self._buckets: dict[int, tuple[np.ndarray, object, object]] = {}  # frames -> (mel, encoder, decoder)
        self._cross: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # frames -> the encoder's bound cross K/V
        # Every bucket's cross K/V are views of the front of one buffer each, sized for the longest window:
        # only the last encoded bucket is ever decoded (encode() binds its decoder), and a bucket of its own
        # per window kept every window used so far resident (36.9 MB at 30 s, 98 MB for all five buckets of
        # Whisper base). np.zeros leaves the untouched tail unmapped until a longer window writes it.
        self.max_positions = int(dims["n_audio_ctx"])  # encoder positions of the longest (30-s) window
        size = self.n_layer * heads * self.d_head * self.max_positions
        self._cross_store = (np.zeros(size, np.float32), np.zeros(size, np.float32))
        self._decode = None
        self.frames = 0  # the window bucket of the last encode (0: none yet)

    def mel_buffer(self, frames: int) -> np.ndarray:
        """The bound float32 [1, n_mels, frames] input of a bucket: write the window into it."""
        return self._bucket(frames)[0]

    def _bucket(self, frames: int):
        if frames not in self._buckets:
            positions = frames // 2  # conv2 has stride 2
            L, H, dh = self.n_layer, self.heads, self.d_head
            mel = np.zeros((1, self.n_mels, frames), np.float32)
            if positions > self.max_positions:
                raise ValueError(f"a {frames}-frame window has {positions} encoder positions, more than the "
                                 f"model's {self.max_positions} (dims n_audio_ctx)")
            n = L * H * dh * positions
            cross_k = self._cross_store[0][:n].reshape(L, 1, H, dh, positions)
            cross_v = self._cross_store[1][:n].reshape(L, 1, H, positions, dh)
            # With the device-cache decoder nothing on the host reads cross K/V: a GPU backend keeps them
            # where the encoder wrote them and the decoder reads them there (host_outputs=[]).
            enc = self.encoder.bind({"mel": mel}, {"cross_k": cross_k, "cross_v": cross_v},
                                    host_outputs=[] if self.device_cache else None)
            feeds = {"tokens": self._token, "offset": self._offset}
            for i in range(L):  # per-layer views are contiguous: bound in place
                feeds[f"self_k_{i}"] = self.self_k[i]
                feeds[f"self_v_{i}"] = self.self_v[i]
                feeds[f"cross_k_{i}"] = cross_k[i]
                feeds[f"cross_v_{i}"] = cross_v[i]
            dec = self._bind_decoder(feeds)
            self._buckets[frames] = (mel, enc, dec)
            self._cross[frames] = (cross_k, cross_v)
        return self._buckets[frames]

    def _bind_decoder(self, feeds: dict[str, np.ndarray]):
        if not self.device_cache:
            return self.decoder.bind(feeds, {"logits": self._logits, "new_k": self._new_k, "new_v": self._new_v})
        outputs, resident = {"logits": self._logits}, {}
        for i in range(self.n_layer):
            outputs[f"self_k_out_{i}"], outputs[f"self_v_out_{i}"] = self._k_out[i], self._v_out[i]
            resident[f"self_k_{i}"], resident[f"self_v_{i}"] = f"self_k_out_{i}", f"self_v_out_{i}"
        return self.decoder.bind(feeds, outputs, device_resident=resident, host_outputs=["logits"])

    def encode(self, mel: np.ndarray, stop: Callable[[], bool] | None = None) -> None:
        """Run the encoder on float32 [1, 80, frames]; the decoder then attends to it.

        Pass :meth:`mel_buffer` (filled in place) to avoid a copy. The
        self-attention cache is not cleared: slots at and after the current
        offset are masked by the decoder graph, so stale values are never read.

        ``stop``: asked before the run and, where the engine's step can be interrupted
        (``run_unless``: ONNX Runtime), during it; True raises :class:`DecodeStopped`, and what
        the encoder's outputs hold is undefined until the next ``encode`` completes.
        """
        buf, enc, dec = self._bucket(mel.shape[-1])
        if mel is not buf:
            buf[...] = mel
        # TensorRT's graph replay has no run_unless: it cannot be stopped once started.
        run_unless = getattr(enc, "run_unless", None) if stop is not None else None
        if run_unless is not None:
            if not run_unless(stop):
                raise DecodeStopped("stopped during the encoder")
        elif stop is not None and stop():
            raise DecodeStopped("stopped before the encoder")
        else:
            enc.run()
        self._decode = dec
        self.frames = mel.shape[-1]

    def cross(self, frames: int) -> tuple[np.ndarray, np.ndarray]:
        """The bound cross-attention K/V of bucket ``frames`` ([L, 1, H, dh, P], [L, 1, H, P, dh])."""
        return self._cross[frames]

    @property
    def new_k(self) -> np.ndarray:
        """float32 [n_layer, 1, heads, d_head]: the key the last :meth:`step` wrote (host-cache decoder)."""
        return self._new_k

    @property
    def new_v(self) -> np.ndarray:
        return self._new_v

    def step(self, token: int, offset: int) -> np.ndarray:
        """Feed ``token`` at position ``offset`` (0-based); returns float32 logits [n_vocab] (a view, reused)."""
        self._token[0, 0] = token
        self._offset[0] = offset
        self._decode.run()
        if not self.device_cache:  # the device variant wrote the caches itself
            self.self_k[..., offset] = self._new_k
            self.self_v[..., offset, :] = self._new_v
        return self._logits[0]


class LogitFilter(Protocol):
    def apply(self, logits: np.ndarray, sampled: Sequence[int]) -> None:
        """Mask tokens of float32 [n_vocab] ``logits`` in place; ``sampled``: the tokens picked after
        the prompt so far (text and, when decoding with timestamps, timestamp tokens)."""
        ...


@dataclass(frozen=True)
class SuppressTokens:
    """Never sample these ids (non-speech symbols and control tokens)."""

    ids: np.ndarray  # int64 [k]

    def apply(self, logits: np.ndarray, sampled: Sequence[int]) -> None:
        logits[self.ids] = -np.inf


@dataclass(frozen=True)
class SuppressBlank:
    """Do not start the text with a blank or end it before it begins."""

    ids: np.ndarray  # int64: the space token and <|endoftext|>

    def apply(self, logits: np.ndarray, sampled: Sequence[int]) -> None:
        if not sampled:
            logits[self.ids] = -np.inf


@dataclass(frozen=True)
class TimestampRules:
    """OpenAI Whisper's ``ApplyTimestampRules``, for a prompt without ``<|notimestamps|>``.

    Timestamps come in pairs (a segment's end and the next one's start) except just before
    ``<|endoftext|>``; they never decrease and a segment has a nonzero length; the text starts with a
    timestamp no later than ``max_initial`` steps (0.02 s each); and where the timestamps together are
    more likely than any one text token, a timestamp is taken. The decoder was trained mostly this way:
    faster-whisper decodes with them by default.

    ``last``: the last timestamp index inside the encoder window (None: the model's 30 s). faster-whisper's
    windows are 30 s; in a shorter one (this stage's buckets) Whisper, unbounded, went on past the end of
    a 10-s window and transcribed the sentence a second time.
    """

    begin: int  # <|0.00|>
    no_timestamps: int
    eot: int
    max_initial: int | None = 50  # 1.0 s, Whisper's max_initial_timestamp
    last: int | None = None

    def apply(self, logits: np.ndarray, sampled: Sequence[int]) -> None:
        begin = self.begin
        logits[self.no_timestamps] = -np.inf
        last_start = None if self.last is None else max(self.last - 1, 0)  # a segment must fit before `last`
        if not sampled:  # the text starts with a timestamp
            logits[:begin] = -np.inf
            bounds = [i for i in (self.max_initial, last_start) if i is not None]
            if bounds:
                logits[begin + min(bounds) + 1:] = -np.inf
            return
        last = sampled[-1] >= begin
        penultimate = len(sampled) < 2 or sampled[-2] >= begin
        if last:
            if penultimate:  # a pair is complete: text follows
                logits[begin:] = -np.inf
            else:  # a segment's end: the next start or the end of the text
                logits[: self.eot] = -np.inf
                if last_start is not None:
                    logits[begin + last_start + 1:] = -np.inf
        elif self.last is not None:  # inside a segment: it ends by the end of the audio
            logits[begin + self.last + 1:] = -np.inf
        stamps = [t for t in sampled if t >= begin]
        if stamps:  # never back in time, and no empty segment
            floor = stamps[-1] if last and not penultimate else stamps[-1] + 1
            logits[begin:floor] = -np.inf
        logp = log_softmax(logits)
        stamp_mass = np.logaddexp.reduce(logp[begin:])
        if stamp_mass > logp[:begin].max():
            logits[:begin] = -np.inf


def is_timestamp(token: int, stamps: int | None) -> bool:
    """Whether ``token`` is a timestamp of a decode with them (``stamps``: ``<|0.00|>``'s id); with
    ``<|notimestamps|>`` (``stamps`` None) every pick counts as text, as it always did."""
    return stamps is not None and token >= stamps


class GreedyDecoder:
    """Argmax; accumulates the log-probability of every pick, ``<|endoftext|>`` included, but of no
    timestamp (ids from ``stamps``; None: every pick): the confidence limits that read it were set on
    text decoded without timestamps.

    With ``marks`` (token ids of sentence-final marks) it also keeps, for the last pick, the
    probability mass the model put on ending the sentence there (:attr:`mark_mass`).
    """

    def __init__(self, eot: int, marks: np.ndarray | None = None, stamps: int | None = None):
        self.eot = eot
        self.stamps = stamps
        self.sum_logprob = 0.0
        self.marks = marks
        self.mark_mass = float("nan")

    def pick(self, logits: np.ndarray) -> int:
        token = int(logits.argmax())
        logp = log_softmax(logits)
        if not is_timestamp(token, self.stamps):
            self.sum_logprob += float(logp[token])
        if self.marks is not None and len(self.marks):
            self.mark_mass = float(np.exp(logp[self.marks]).sum())
        return token


def repeated_tail(tokens: Sequence[int], long_block: int = 8, short_repeats: int = 3) -> int:
    """Length of a looping tail to cut, or 0.

    Greedy Whisper without temperature fallback can loop ("A. B. B. B. ...").
    A tail that repeats the block just before it is a loop when the block is at
    least ``long_block`` tokens (a verbatim 8-token repeat does not occur in
    speech), or when a shorter block repeats ``short_repeats`` times in a row.
    Returns how many tokens to drop so that one copy of the block stays.
    """
    n = len(tokens)
    for size in range(1, n // 2 + 1):
        if tokens[n - size :] != tokens[n - 2 * size : n - size]:
            continue
        if size >= long_block:
            return size
        if n >= short_repeats * size and all(
            tokens[n - (k + 1) * size : n - k * size] == tokens[n - size :] for k in range(1, short_repeats)
        ):
            return (short_repeats - 1) * size
    return 0


class DecodeStopped(Exception):
    """The caller's ``stop`` asked for the decode to end: its result is no longer wanted (the loop's
    partial caption when the speaker pauses; see loop/pause_watch.py)."""


@dataclass(frozen=True)
class WindowResult:
    """Decoding of one encoder window."""

    tokens: tuple[int, ...]  # text tokens, without the prompt, timestamps or <|endoftext|>
    sum_logprob: float  # natural log, over tokens and the final <|endoftext|> (not over timestamps)
    no_speech_prob: float  # P(<|nospeech|>) at the <|startoftranscript|> step
    language: str
    language_prob: float
    # P(a sentence-final mark) where the text ends: at the step that picked the last text token when
    # that token is a final mark ("." / "?" / ...), else at the step that picked <|endoftext|>. Whisper
    # ends most fragments with a period, but with less of its mass than it gives a finished sentence's
    # (the turn policy's evidence). NaN: no verdict (no final-mark ids, no text, or the decode was cut at
    # the token limit or a repetition loop).
    end_mark_prob: float = float("nan")

    @property
    def avg_logprob(self) -> float:
        return self.sum_logprob / (len(self.tokens) + 1)


@dataclass(frozen=True)
class Vocabulary:
    """The control-token ids decoding needs."""

    eot: int
    no_speech: int
    language_ids: Sequence[int]  # empty for English-only models
    languages: Sequence[str]  # codes, in the order of ``language_ids``; ("en",) for English-only
    sot_prev: int = -1  # <|startofprev|>: starts the previous text a window is conditioned on (-1: none)
    final_marks: Sequence[int] = ()  # ids of sentence-final marks (".", "?", "!", "。", ...), for end_mark_prob


class PromptFn(Protocol):
    def __call__(self, language: str) -> list[int]:
        """Start sequence for ``language``, ``<|startoftranscript|>`` first."""
        ...


class LanguageChooser(Protocol):
    def __call__(self, detected: str, probability: float) -> str:
        """The language to decode in, given the detected one and its probability (e.g. keep the
        previous utterance's language unless the detection is sure)."""
        ...


def detect_language(sot_logits: np.ndarray, vocab: Vocabulary,
                    candidates: Sequence[str] | None = None) -> tuple[str, float]:
    """Most likely language from the ``<|startoftranscript|>`` logits (softmax over language tokens
    only; over the ``candidates`` codes' tokens only when given: the languages a device expects)."""
    index = range(len(vocab.languages)) if not candidates else [vocab.languages.index(c) for c in candidates]
    ids = np.asarray([vocab.language_ids[i] for i in index])
    probs = softmax(sot_logits[ids])
    best = int(probs.argmax())
    return vocab.languages[list(index)[best]], float(probs[best])


class TextSearch(Protocol):
    def run(self, task: "DecodingTask", logits: np.ndarray, start: int,
            stop: Callable[[], bool] | None) -> tuple[tuple[int, ...], float, float]:
        """The text after the prompt whose last step gave ``logits`` (first text position ``start``):
        (tokens, sum of log-probabilities, end-mark probability or NaN)."""
        ...


@dataclass(frozen=True)
class DecodingTask:
    """Decoding of one encoder window: prompt, guards, then argmax until ``<|endoftext|>`` (or the
    ``search`` strategy given: :class:`~edge_rt.stages.asr.beam.BeamSearch`)."""

    inference: WhisperInference
    vocab: Vocabulary
    filters: Sequence[LogitFilter]
    max_new_tokens: int
    search: TextSearch | None = None  # None: greedy
    # The first timestamp id (<|0.00|>) when the prompt asks for timestamps (with TimestampRules among the
    # filters): they are left out of the text and its score. None: <|notimestamps|>, every pick is kept as
    # before (the model can still pick a timestamp token; the tokenizer writes no text for it).
    stamps: int | None = None

    def _prompt(self, prompt_for: PromptFn, language: "str | LanguageChooser | None", previous: Sequence[int],
                previous_language: str | None, candidates: Sequence[str] | None = None
                ) -> tuple[np.ndarray, float, str, float, int]:
        """Feed the start sequence; returns (last logits, P(no speech), language, its detection
        probability, the position of the first text token).

        With ``previous`` text tokens the sequence is ``<|startofprev|> previous... <|startoftranscript|>
        <|lang|> <|task|> <|notimestamps|>``, as faster-whisper's ``initial_prompt``; they are left out
        when the window is decoded in another language than ``previous_language`` (None: any), as
        text in another language makes Whisper copy it instead of transcribing. The
        ``<|startoftranscript|>`` step gives the no-speech probability (after the previous text, as
        Whisper does) and the language; the language is detected from ``<|startoftranscript|>`` alone
        at position 0 (one extra step when there is previous text), as Whisper detects it.
        """
        vocab, step = self.vocab, self.inference.step
        sot = prompt_for(language if isinstance(language, str) else vocab.languages[0])[0]
        prefix = [vocab.sot_prev, *previous] if len(previous) else []
        if prefix and vocab.sot_prev < 0:
            raise ValueError("previous text needs the <|startofprev|> id in Vocabulary.sot_prev")
        length = len(prefix) + len(prompt_for(vocab.languages[0]))
        if length + self.max_new_tokens > MAX_TEXT_CTX:
            raise ValueError(f"a prompt of {length} tokens leaves no room for {self.max_new_tokens} new tokens in the "
                             f"decoder's {MAX_TEXT_CTX}-position cache; bound the previous text")
        detect = not isinstance(language, str) and bool(vocab.language_ids)
        detected, language_prob, sot_logits = vocab.languages[0], 1.0, None
        if detect:
            sot_logits = step(sot, 0)
            detected, language_prob = detect_language(sot_logits, vocab, candidates)
        if isinstance(language, str):
            chosen = language
        elif language is not None and vocab.language_ids:
            chosen = language(detected, language_prob)
        else:
            chosen = detected
        if previous_language is not None and chosen != previous_language:
            prefix = []
        if prefix or sot_logits is None:
            for offset, token in enumerate(prefix):
                step(token, offset)
            sot_logits = step(sot, len(prefix))
        no_speech = float(softmax(sot_logits)[vocab.no_speech])
        sequence = prompt_for(chosen)
        logits = sot_logits
        for offset, token in enumerate(sequence[1:], start=len(prefix) + 1):
            logits = step(token, offset)
        return logits, no_speech, chosen, language_prob, len(prefix) + len(sequence)

    def run(self, prompt_for: PromptFn, language: "str | LanguageChooser | None",
            previous: Sequence[int] = (), previous_language: str | None = None,
            candidates: Sequence[str] | None = None, stop: Callable[[], bool] | None = None) -> WindowResult:
        """Decode the window last passed to ``inference.encode``.

        ``language``: a code, None (detect), or a :class:`LanguageChooser` of the detected language.
        ``previous``: text tokens to condition on when the window is in ``previous_language`` (None:
        always); the caller bounds them (see :class:`~edge_rt.stages.asr.whisper.AsrOptions`).
        ``candidates``: the language codes detection chooses among (None: all the model's).
        ``stop``: asked before each decoder step; True ends the decode with :class:`DecodeStopped`.
        """
        logits, no_speech, language, language_prob, start = self._prompt(prompt_for, language, previous,
                                                                          previous_language, candidates)
        if self.search is not None:
            sampled, sum_logprob, end_mark = self.search.run(self, logits, start, stop)
        else:
            sampled, sum_logprob, end_mark = self._greedy(logits, start, stop)
        if self.stamps is not None:
            sampled = tuple(t for t in sampled if not is_timestamp(t, self.stamps))
        return WindowResult(sampled, sum_logprob, no_speech, language, language_prob, end_mark)

    def _greedy(self, logits: np.ndarray, start: int, stop: Callable[[], bool] | None
                ) -> tuple[tuple[int, ...], float, float]:
        """Argmax until ``<|endoftext|>``: (sampled tokens, sum of log-probabilities, end-mark probability).

        The end-mark probability is read where the text ends: at the step that picked the last text
        token when it is a final mark, else at the step after it (``<|endoftext|>``, or the timestamp
        that closes its segment when decoding with timestamps).
        """
        eot, stamps = self.vocab.eot, self.stamps
        marks = np.asarray(self.vocab.final_marks, np.int64)
        decoder, sampled, text = GreedyDecoder(eot, marks, stamps), [], []
        end_mark, mark_ids, ended = float("nan"), set(self.vocab.final_marks), False
        for n in range(self.max_new_tokens):
            if stop is not None and stop():
                raise DecodeStopped(f"stopped after {n} tokens")
            if n:
                logits = self.inference.step(sampled[-1], start + n - 1)
            for f in self.filters:
                f.apply(logits, sampled)
            token = decoder.pick(logits)
            stamp = is_timestamp(token, stamps)
            open_text = bool(sampled) and not is_timestamp(sampled[-1], stamps) and sampled[-1] not in mark_ids
            if (token == eot or stamp) and open_text:  # the text ended without a mark: how close it came to one
                end_mark = decoder.mark_mass
            if token == eot:
                ended = True
                break
            sampled.append(token)
            if stamp:
                continue
            text.append(token)
            if token in mark_ids:
                end_mark = decoder.mark_mass
            cut = repeated_tail(text)
            if cut:  # a repetition loop: keep one copy and stop
                del text[-cut:]
                sampled = text
                break
        if not ended:
            end_mark = float("nan")  # cut at the token limit or a repetition loop: no verdict
        return tuple(sampled), decoder.sum_logprob, end_mark
