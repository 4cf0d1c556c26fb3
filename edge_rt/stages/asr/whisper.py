"""Speech -> text with Whisper: static-window encoder + one-step greedy decoder.

The pack holds the graphs written by :mod:`edge_rt.build.export.whisper`. Audio is
cut into consecutive windows of the largest bucket (30 s), each window is encoded
in the smallest bucket that holds it, and decoded greedily with Whisper's guards
(``<|notimestamps|>``, blank and non-speech suppression, the no-speech rule).
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

import numpy as np

from edge_rt.errors import AudioInputError, PackNotBuiltError, UnsupportedLanguageError
from edge_rt.stages.asr import mel as melmod
from edge_rt.stages.asr.beam import BeamSearch
from edge_rt.stages.asr.decoding import (
    DecodeStopped,
    DecodingTask,
    LanguageChooser,
    SuppressBlank,
    SuppressTokens,
    TimestampRules,
    Vocabulary,
    WhisperInference,
    WindowResult,
)
from edge_rt.stages.asr.tokenizer import TASKS, WhisperTokenizer, has_words
from edge_rt.units import HOP_LENGTH, MAX_TEXT_CTX, SAMPLE_RATE, bucket_frames

if TYPE_CHECKING:
    from edge_rt.backends.factory import EngineFactory
    from edge_rt.pack import BuiltPack

__all__ = ["Asr", "AsrOptions", "AsrResult", "DecodeStopped", "Prompt"]

PROMPT_MAX = 4  # <|startoftranscript|> <|lang|> <|task|> <|notimestamps|>
DEFAULT_MAX_NEW_TOKENS = MAX_TEXT_CTX // 2  # 224, as OpenAI Whisper and CTranslate2 cap one window


@dataclass(frozen=True)
class AsrOptions:
    """How :class:`Asr` loads and decodes; validated on creation."""

    precision: str = "fp32"  # "fp32" | "int8" (falls back to fp32 when the pack has no int8 graph)
    threads: int = 2  # ONNX Runtime intra-op threads per graph
    bucket_s: int | None = None  # force every window to this bucket (s); None = smallest that fits
    no_speech_threshold: float | None = 0.6  # silent if P(no speech) is above this ...
    logprob_threshold: float | None = -1.0  # ... and the average log-probability is below this
    compression_ratio_threshold: float | None = 2.4  # gzip ratio above which a window is a repetition loop
    # Windows whose peak |sample| is below this (-78 dBFS, digital silence) are not decoded:
    # Whisper hallucinates " you" on zeros with no_speech_prob ~0.9 but avg_logprob > -1.
    silence_peak: float | None = 2.0**-13
    suppress_blank: bool = True  # no space / <|endoftext|> as the first token
    suppress_tokens: tuple[int, ...] = (-1,)  # ids never sampled; -1 = Whisper's non-speech symbols
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # text tokens per window
    # Previous text a window may be conditioned on (``transcribe(prompt=...)``): its last this-many tokens,
    # after <|startofprev|>. Each costs one decoder step (the one-step graph has no prefill), so it is
    # bounded well under Whisper's own 223: 64 tokens are ~3 English sentences, and the cache keeps a
    # fixed 448 positions whatever the prompt (1 + 64 + 4 + 224 = 293).
    max_prompt_tokens: int = 64
    # Hypotheses kept by beam search (Whisper's and faster-whisper's beam_size); 1 = greedy. Each costs
    # one decoder run per token (the decoder graph has batch 1) and 24 KB per token of K/V (Whisper base).
    beam_size: int = 1
    # Decode with Whisper's timestamp tokens (the prompt without <|notimestamps|>, OpenAI Whisper's timestamp
    # rules, each segment ended inside the encoder window; faster-whisper's default) and keep only the text.
    # False: <|notimestamps|>, as CTranslate2's without_timestamps=True. Off: through the loop on the noisy
    # eval's English mixes (`edge-rt eval --noise --kinds babble,pink,brown,music --snr 5,10`, one machine,
    # 2026-12-05) it was worse everywhere: clean 6.05 -> 6.98 % WER, pink 5 dB 39.5 -> 40.9 %, pink 10 dB
    # 14.4 -> 20.9 %, babble 10 dB 35.4 -> 55.3 % (README, Noise: "What faster-whisper's lead at pink 5 dB rests on").
    timestamps: bool = False
    # A window decoded in a detected language that writes no word while Whisper hears speech (P(no speech) at
    # or under no_speech_threshold) is decoded once more, detected among the other languages (see
    # Asr._other_languages): a misdetected language can leave the decoder writing nothing at all. Costs a
    # second decode only then. False: the empty result stands.
    retry_language: bool = True

    def __post_init__(self):
        if self.precision not in ("fp32", "int8"):
            raise ValueError(f"AsrOptions.precision must be 'fp32' or 'int8', not {self.precision!r}")
        if self.threads < 1:
            raise ValueError(f"AsrOptions.threads must be >= 1, not {self.threads}")
        if not 1 <= self.max_new_tokens <= MAX_TEXT_CTX - PROMPT_MAX:
            raise ValueError(
                f"AsrOptions.max_new_tokens must be in 1..{MAX_TEXT_CTX - PROMPT_MAX} (the decoder cache holds "
                f"{MAX_TEXT_CTX} positions, {PROMPT_MAX} of them for the prompt), not {self.max_new_tokens}"
            )
        room = MAX_TEXT_CTX - PROMPT_MAX - self.max_new_tokens - 1  # 1: <|startofprev|>
        if self.max_prompt_tokens < 0 or (self.max_prompt_tokens and self.max_prompt_tokens > room):
            raise ValueError(
                f"AsrOptions.max_prompt_tokens must be in 0..{max(room, 0)} with max_new_tokens={self.max_new_tokens} "
                f"(the decoder cache holds {MAX_TEXT_CTX} positions), not {self.max_prompt_tokens}"
            )
        if self.silence_peak is not None and not 0 <= self.silence_peak < 1:
            raise ValueError(f"AsrOptions.silence_peak is an amplitude in [0, 1) or None, not {self.silence_peak}")
        if not 1 <= self.beam_size <= 16:
            raise ValueError(f"AsrOptions.beam_size must be in 1..16 (1 = greedy), not {self.beam_size}")
        if any(t < -1 for t in self.suppress_tokens):
            raise ValueError(f"AsrOptions.suppress_tokens holds token ids or -1, not {self.suppress_tokens}")


class Prompt(NamedTuple):
    """Previous text for :meth:`Asr.transcribe` to condition on, and the language it is in."""

    text: str
    language: str | None = None  # used only when the audio is decoded in this language (None: always)


@dataclass(frozen=True)
class AsrResult:
    """What :meth:`Asr.transcribe` heard. Over several 30-s windows the numbers combine:
    ``avg_logprob`` is token-weighted, ``no_speech_prob`` the smallest of any window."""

    text: str  # stripped; "" when every window was judged silent
    language: str  # code, e.g. "en"
    language_prob: float  # detection probability; 1.0 when the language was given
    no_speech_prob: float
    avg_logprob: float  # natural log per token, <|endoftext|> included
    compression_ratio: float  # gzip ratio of ``text``; above ~2.4 means a repetition loop
    tokens: tuple[int, ...] = field(repr=False)  # text token ids of every kept window
    bucket_s: int  # encoder window of the (last) window, seconds
    windows: int = 1  # 30-s windows decoded
    # Whisper's probability of a sentence-final mark where the text ends (last kept window; NaN: no
    # verdict): see WindowResult.end_mark_prob. The turn policy's evidence that a sentence is done.
    end_mark_prob: float = float("nan")


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


class Asr:
    """Whisper speech recognition (and X->English speech translation) on a built pack.

    Create with :meth:`from_pack`; the engines and the KV cache are allocated once.
    """

    def __init__(self, inference: WhisperInference, tokenizer: WhisperTokenizer, buckets_s, options: AsrOptions):
        self.options = options
        self.tokenizer = tokenizer
        self._inference = inference
        self.buckets_s: tuple[int, ...] = tuple(sorted(int(b) for b in buckets_s))
        if options.bucket_s is not None and options.bucket_s not in self.buckets_s:
            raise ValueError(f"AsrOptions.bucket_s={options.bucket_s} is not a bucket of this pack: {self.buckets_s}")
        s = tokenizer.special
        vocab = Vocabulary(s.eot, s.no_speech, tokenizer.language_ids, tokenizer.languages, s.sot_prev,
                           tuple(tokenizer.final_mark_tokens()))
        filters = [SuppressTokens(np.asarray(tokenizer.suppress_tokens(options.suppress_tokens), np.int64))]
        if options.suppress_blank:
            filters.insert(0, SuppressBlank(np.asarray(tokenizer.blank_tokens(), np.int64)))
        # With timestamps each window gets the rules bounded to its encoder window (see _task_for).
        self._rules = TimestampRules(s.timestamp_begin, s.no_timestamps, s.eot) if options.timestamps else None
        search = None
        if options.beam_size > 1:
            search = BeamSearch.of(inference, options.beam_size, options.max_new_tokens)
        self._task = DecodingTask(inference, vocab, tuple(filters), options.max_new_tokens, search)
        stride_s = options.bucket_s or self.buckets_s[-1]
        self._stride = bucket_frames(stride_s)  # frames per consecutive window

    @classmethod
    def from_pack(cls, pack: "BuiltPack", options: AsrOptions = AsrOptions(), *, engines: "EngineFactory") -> "Asr":
        """Load the pack's ``asr`` stage on the engines ``engines`` builds (see :mod:`edge_rt.backends.factory`)."""
        entry = pack.stage("asr")
        if entry.get("kind") != "whisper":
            raise PackNotBuiltError(f"pack '{pack.name}' has an asr stage of kind {entry.get('kind')!r}, not 'whisper'")
        encoder = engines.load("asr", "encoder", precision=options.precision, threads=options.threads)
        decoder = engines.load("asr", "decoder", precision=options.precision, threads=options.threads)
        config = json.loads(pack.asset("asr", "config").read_text())
        multilingual = bool(entry["multilingual"])
        tokenizer = WhisperTokenizer(pack.asset("asr", "tokenizer"), config.get("lang_ids", []), multilingual)
        # Packs built since the decoder took a `beams` dimension say so in its I/O (beam search then batches).
        beams = entry.get("io", {}).get("decoder", {}).get("inputs", {}).get("tokens", [1])[0] == "beams"
        inference = WhisperInference(encoder, decoder, entry["dims"], beams=beams)
        return cls(inference, tokenizer, entry["buckets_s"], options)

    def with_options(self, options: AsrOptions) -> "Asr":
        """Another :class:`Asr` on the same engines and cache (not for concurrent use with this one).

        ``precision`` and ``threads`` are fixed when the engines load; change them with :meth:`from_pack`.
        """
        if (options.precision, options.threads) != (self.options.precision, self.options.threads):
            raise ValueError("with_options cannot change precision or threads; load a new Asr with from_pack")
        return Asr(self._inference, self.tokenizer, self.buckets_s, options)

    @property
    def languages(self) -> tuple[str, ...]:
        """Language codes accepted by :meth:`transcribe` (``("en",)`` for English-only models)."""
        return self.tokenizer.languages

    @property
    def multilingual(self) -> bool:
        return self.tokenizer.multilingual

    def _check_request(self, language, task) -> None:
        if callable(language):
            language = None  # checked when it chooses (see _checked)
        if callable(task):
            task = "translate" if self.multilingual else "transcribe"  # the strictest a chooser can ask
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, not {task!r}")
        if language is not None and language not in self.languages:
            raise UnsupportedLanguageError(
                f"language {language!r} is not supported by this Whisper model; valid codes: "
                f"{', '.join(self.languages)}"
                + ("" if self.multilingual else " (English-only model: use a multilingual pack)")
            )
        if task == "translate" and not self.multilingual:
            raise UnsupportedLanguageError(
                "task='translate' needs a multilingual Whisper model; this pack's model is English-only "
                "(valid: task='transcribe', language 'en'); use the default pack"
            )

    def _bucket_for(self, frames: int) -> int:
        if self.options.bucket_s is not None:
            return self.options.bucket_s
        return next((b for b in self.buckets_s if bucket_frames(b) >= frames), self.buckets_s[-1])

    def transcribe(self, audio: np.ndarray, *, language: str | LanguageChooser | None = None,
                   task: str | Callable[[str], str] = "transcribe", prompt: str | Prompt | None = None,
                   languages: Sequence[str] | None = None, stop: Callable[[], bool] | None = None) -> AsrResult:
        """Recognise one utterance.

        Args:
            audio: float32 [n] mono at 16 kHz. Longer than one window (30 s): decoded in
                consecutive windows and the texts joined.
            language: spoken language code (see :attr:`languages`); None = detect from the
                first window (multilingual models) or "en"; or a function of the detected
                (language, probability) that returns the code to decode in (the loop keeps the
                previous utterance's language unless the detection is sure).
            task: "transcribe", or "translate" for Whisper's X->English translation, or a
                function of the (detected) language that returns one of the two: one decode
                then detects the language and does the right task (the loop's single pass).
            prompt: previous text to condition on (Whisper's ``<|startofprev|>``, faster-whisper's
                ``initial_prompt``): its last ``options.max_prompt_tokens`` tokens; a :class:`Prompt`
                with a language is used only when the audio is decoded in that language (Whisper
                copies text of another language instead of transcribing). Later 30-s windows are
                conditioned on the window before them instead. None or "": none.
            languages: when the language is detected, the codes it is chosen among (the languages
                people speak to this device; a kiosk in noise otherwise hears Arabic in an English
                fragment). None: any of the model's.
            stop: asked before each window's encoder run, during it (from a helper thread, where the
                backend can interrupt a run: ONNX Runtime) and before each decoder step; True abandons
                the decode with :class:`DecodeStopped` (the loop's partial caption when a pause begins).

        Returns:
            The joined text of every window not judged silent, with decoding statistics.

        Raises:
            UnsupportedLanguageError: unknown language, or translate on an English-only model.
            AudioInputError: audio is not a finite 1-D float array.
        """
        self._check_request(language, task)
        candidates = self._candidates(languages)
        audio = _check_audio(audio)
        if callable(language):
            language = self._checked(language)
        if not isinstance(prompt, Prompt):
            prompt = Prompt(prompt or "")
        previous = self.tokenizer.previous_text(prompt.text, self.options.max_prompt_tokens)
        previous_language = prompt.language
        mel = melmod.log_mel(audio)
        total = melmod.content_frames(mel)
        windows = []

        def prompt_for(lang: str) -> list[int]:
            return self.tokenizer.prompt(lang, _resolve(task, lang, self.multilingual), self.options.timestamps)

        for start in range(0, max(total, 1), self._stride):
            frames = min(self._stride, total - start)
            bucket = self._bucket_for(frames)
            if self._digital_silence(audio[start * HOP_LENGTH : (start + frames) * HOP_LENGTH]):
                lang = language if isinstance(language, str) else self.languages[0]
                windows.append(_Window(WindowResult((), 0.0, 1.0, lang, 0.0), bucket, "", silent=True, gated=True))
                continue
            frames_b = bucket_frames(bucket)
            self._inference.encode(melmod.window(mel, start, frames_b, out=self._inference.mel_buffer(frames_b)), stop)
            decode = self._task_for(frames_b)
            r = decode.run(prompt_for, language, previous, previous_language, candidates, stop)
            text = self.tokenizer.decode(r.tokens).strip()
            others = self._other_languages(r, text, language, candidates)
            if others:  # heard speech, wrote nothing, in a detected language: the next likeliest one
                again = decode.run(prompt_for, None, previous, previous_language, others, stop)
                again_text = self.tokenizer.decode(again.tokens).strip()
                if has_words(again_text):
                    r, text = again, again_text
            if not isinstance(language, str):
                language = r.language  # later windows keep the first window's language
            if previous:  # a later window follows this one's text, as Whisper's condition_on_previous_text
                previous, previous_language = list(r.tokens[-self.options.max_prompt_tokens:]), r.language
            windows.append(_Window(r, bucket, text, silent=self._is_silent(r, text)))
        return self._combine(windows)

    def _other_languages(self, r: WindowResult, text: str, language, candidates) -> tuple[str, ...]:
        """The languages to detect among again when the window ``r`` was decoded in a detected language
        (``language`` not a code: None or a chooser), Whisper heard speech (P(no speech) at or under
        ``no_speech_threshold``) and its ``text`` has no word: every candidate but the one that failed.
        () when it should not be decoded again (``AsrOptions.retry_language`` off, given language, silence,
        words written, an English-only model).

        Seen live (en_fleurs_luna with 320 ms of pre-roll): detected as Hawaiian (0.51, English 0.14), the
        decode wrote only timestamp tokens and the clip came back empty, with P(no speech) 0.02.
        """
        o = self.options
        if not o.retry_language or isinstance(language, str) or not self.multilingual or has_words(text):
            return ()
        if o.no_speech_threshold is not None and r.no_speech_prob > o.no_speech_threshold:
            return ()
        return tuple(c for c in (candidates or self.languages) if c != r.language)

    def _task_for(self, frames: int) -> DecodingTask:
        """The decoding task of an encoder window of ``frames`` mel frames (its bucket): with timestamps,
        the rules end the last segment inside it (a timestamp is 0.02 s, two frames), as a 30-s window
        bounds faster-whisper's."""
        if self._rules is None:
            return self._task
        rules = dataclasses.replace(self._rules, last=max(frames // 2, 1))
        return dataclasses.replace(self._task, filters=(*self._task.filters, rules), stamps=rules.begin)

    def _candidates(self, languages: Sequence[str] | None) -> tuple[str, ...] | None:
        """``languages`` checked against the model's (None when every language may be detected)."""
        if languages is None or not self.multilingual:
            return None
        bad = [c for c in languages if c not in self.languages]
        if bad or not languages:
            raise UnsupportedLanguageError(f"languages to detect among must be codes of this model, got "
                                           f"{list(languages)}; valid codes: {', '.join(self.languages)}")
        return tuple(dict.fromkeys(languages))

    def _checked(self, choose: LanguageChooser) -> LanguageChooser:
        """``choose`` raising, with the valid codes, when it returns a language the model lacks."""

        def checked(detected: str, probability: float) -> str:
            chosen = choose(detected, probability)
            if chosen not in self.languages:
                raise UnsupportedLanguageError(f"the language chooser returned {chosen!r}; valid codes: "
                                               f"{', '.join(self.languages)}")
            return chosen

        return checked

    def _digital_silence(self, samples: np.ndarray) -> bool:
        peak = self.options.silence_peak
        return peak is not None and float(np.abs(samples).max(initial=0.0)) < peak

    def _is_silent(self, r: WindowResult, text: str) -> bool:
        """faster-whisper's rule (no speech AND low confidence), plus: no speech AND a repetition loop.

        faster-whisper would retry a looping window with sampling and then usually judge it
        silent; greedy-only decoding drops it directly.
        """
        o = self.options
        if o.no_speech_threshold is None or r.no_speech_prob <= o.no_speech_threshold:
            return False
        unsure = o.logprob_threshold is None or r.avg_logprob <= o.logprob_threshold
        looping = o.compression_ratio_threshold is not None and compression_ratio(text) > o.compression_ratio_threshold
        return unsure or looping

    def _combine(self, windows: list["_Window"]) -> AsrResult:
        kept = [w for w in windows if not w.silent]
        text = " ".join(w.text for w in kept if w.text)
        results = [w.result for w in windows]
        first = next((w.result for w in windows if not w.gated), results[0])  # the window that set the language
        return AsrResult(
            text=text,
            language=first.language,
            language_prob=first.language_prob,
            no_speech_prob=min(r.no_speech_prob for r in results),
            avg_logprob=sum(r.sum_logprob for r in results) / sum(len(r.tokens) + 1 for r in results),
            compression_ratio=compression_ratio(text),
            tokens=tuple(t for w in kept for t in w.result.tokens),
            bucket_s=windows[-1].bucket_s,
            windows=len(windows),
            end_mark_prob=kept[-1].result.end_mark_prob if kept else float("nan"),
        )


@dataclass(frozen=True)
class _Window:
    result: WindowResult
    bucket_s: int
    text: str
    silent: bool
    gated: bool = False  # skipped as digital silence, never decoded


def _resolve(task, language: str, multilingual: bool) -> str:
    """The task for ``language`` (a fixed task, or the caller's chooser)."""
    chosen = task(language) if callable(task) else task
    if chosen not in TASKS or (chosen == "translate" and not multilingual):
        raise ValueError(f"the task chooser returned {chosen!r} for {language!r}; valid: {TASKS}"
                         + ("" if multilingual else " (translate needs a multilingual model)"))
    return chosen


def _check_audio(audio: np.ndarray) -> np.ndarray:
    audio = np.asarray(audio)
    if audio.ndim != 1 or audio.dtype.kind != "f":
        raise AudioInputError(
            f"Asr.transcribe needs float32 mono audio of shape [n] at {SAMPLE_RATE} Hz; got {audio.dtype} "
            f"{audio.shape} (downmix to mono and convert int16 with x / 32768)"
        )
    if not np.isfinite(audio).all():
        raise AudioInputError("audio holds NaN or infinite samples; check the capture or decoding step")
    return audio.astype(np.float32, copy=False)
