"""Text to speech: Piper (neural VITS) where the pack has a voice, espeak-ng's formant voice elsewhere.

Text is split into sentences by espeak-ng exactly as piper-tts splits it; each
sentence becomes one audio chunk, so the loop can play the first sentence while
the rest is synthesized (:meth:`Tts.clauses`). Where the pack split a Piper voice
into its prior and vocoder (edge_rt/build/export/piper_split.py), :meth:`Tts.clauses`
streams each sentence in vocoder windows (vocoder.py): the first audio is ready after
the prior and one 0.37-s window. A streamed sentence is scaled by the voice's
``stream_peak`` (the build's probe sentences), not by its own peak as piper-tts and
:meth:`Tts.synthesize` do, since that peak is known only at the sentence's end.

Piper's graph takes ``input [1, phonemes]`` int64 ids, ``input_lengths [1]`` and
``scales [3]`` (noise, length, noise_w) and returns ``output [1, 1, 1, samples]``.
The ids are zero-padded to a few fixed lengths (``phoneme_buckets`` in the
manifest): VITS masks every layer by ``input_lengths`` and gives padding a
duration of zero frames, so the waveform has the unpadded length and differs
from the unpadded run by < 2e-5 (measured on this voice). The output length is
still data dependent (it is the sum of the predicted durations): the inputs are
bound once per bucket, but the waveform cannot be written into a preallocated
buffer, so the backend allocates it on every run (on TensorRT that needs an output
allocator, and Piper is the one engine that cannot be captured in a CUDA graph).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Mapping

import numpy as np

from edge_rt.backends.base import BoundRun, Engine
from edge_rt.errors import PackNotBuiltError, UnsupportedLanguageError
from edge_rt.pack import PRECISIONS, BuiltPack
from edge_rt.stages.tts.espeak import Espeak, EspeakSentence
from edge_rt.stages.tts.piper_ids import PiperVoiceConfig, phonemes_to_ids, split_phonemes
from edge_rt.stages.tts.vocoder import Vocoder, VocoderOptions

if TYPE_CHECKING:
    from edge_rt.backends.factory import EngineFactory

__all__ = ["Tts", "TtsAudio", "TtsOptions", "PiperVoice", "DEFAULT_PHONEME_BUCKETS", "first_clauses"]

DEFAULT_PHONEME_BUCKETS = (32, 64, 128, 256, 512)  # phoneme-id lengths the input is padded to
PIPER = "piper"
ESPEAK = "espeak"


@dataclass(frozen=True)
class TtsOptions:
    """How speech is synthesized."""

    precision: str = "fp32"  # "fp32" | "int8" (the pack falls back to fp32; Piper ships fp32 only)
    threads: int = 2  # ONNX Runtime intra-op threads for Piper
    length_scale: float | None = None  # phoneme durations x this (> 1 slower); None = the voice's (1.0)
    noise_scale: float | None = None  # generator noise; None = the voice's (0.667)
    noise_w: float | None = None  # duration noise; None = the voice's (0.8)
    deterministic: bool = False  # no noise at all: the same text always gives the same waveform
    normalize: bool = True  # scale each sentence to peak 1.0, as piper-tts does by default
    bucketed: bool = True  # pad phoneme ids to the pack's fixed lengths (static input shapes)
    espeak_rate_wpm: int = 175  # speaking rate of the formant voice, words per minute
    voices: tuple[str, ...] | None = None  # load only these languages' Piper voices; None: all the pack has
    # clauses(): the first clause of the first sentence is its own chunk (audio starts after one
    # clause, not one sentence); synthesize() and every later sentence are unaffected.
    stream_first_clause: bool = True
    # clauses(): Piper sentences in vocoder windows where the pack has the voice's parts (vocoder.py);
    # None: whole sentences (and the whole graph is loaded instead of its two parts).
    vocoder: VocoderOptions | None = VocoderOptions()

    def __post_init__(self) -> None:
        _verify_options(self)


def _verify_options(o: TtsOptions) -> None:
    if o.precision not in PRECISIONS:
        raise ValueError(f"TtsOptions.precision must be one of {PRECISIONS}, not {o.precision!r}")
    if o.threads < 1:
        raise ValueError(f"TtsOptions.threads must be >= 1, not {o.threads}")
    if o.length_scale is not None and o.length_scale <= 0:
        raise ValueError(f"TtsOptions.length_scale must be > 0 (1.0 = the voice's pace), not {o.length_scale}")
    for name in ("noise_scale", "noise_w"):
        value = getattr(o, name)
        if value is not None and value < 0:
            raise ValueError(f"TtsOptions.{name} must be >= 0, not {value}")
        if o.deterministic and value not in (None, 0.0):
            raise ValueError(f"TtsOptions.deterministic means no noise, but {name}={value}; drop one of the two")


@dataclass(frozen=True)
class TtsAudio:
    """Synthesized speech."""

    samples: np.ndarray = field(repr=False)  # float32 mono in [-1, 1], shape [n]
    sample_rate: int  # Hz
    engine: str  # "piper" | "espeak"
    text: str = ""  # the text it speaks ("" on the later windows of a streamed sentence)
    clause: int = 0  # which sentence (or streamed first clause) of the text it belongs to, from 0
    last: bool = True  # the last chunk of that clause (a streamed sentence comes in several)

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


def first_clauses(chunks: Iterator[TtsAudio], n: int) -> Iterator[TtsAudio]:
    """The chunks of the first ``n`` clauses of a :meth:`Tts.clauses` stream; nothing after is synthesized."""
    for chunk in chunks:
        yield chunk
        if chunk.last and chunk.clause >= n - 1:
            return


class PiperVoice:
    """One Piper graph with preallocated, bucketed inputs: phoneme ids -> waveform.

    Args:
        engine: the ONNX graph (``input``, ``input_lengths``, ``scales`` -> ``output``), or with
            ``vocoder`` its prior (-> ``z``).
        config: the voice config.
        scales: (noise_scale, length_scale, noise_w).
        buckets: id lengths to pad to, ascending; ``()`` runs at the exact length.
        vocoder: the voice's vocoder part (vocoder.py) when ``engine`` is its prior; ``peak``: the level
            a streamed sentence is scaled to full scale by (the manifest's ``stream_peak``).
    """

    def __init__(self, engine: Engine, config: PiperVoiceConfig, scales: tuple[float, float, float],
                 buckets: tuple[int, ...] = DEFAULT_PHONEME_BUCKETS, vocoder: Vocoder | None = None,
                 peak: float = 1.0):
        if config.num_speakers > 1:
            raise ValueError("multi-speaker Piper voices are not supported yet; pick a single-speaker voice")
        self.config = config
        self._engine = engine
        self.vocoder = vocoder
        self.peak = float(peak)
        self._out = "z" if vocoder is not None else "output"
        self._buckets = tuple(sorted(buckets))
        self._ids = {n: np.zeros((1, n), dtype=np.int64) for n in self._buckets}
        self._lengths = np.zeros(1, dtype=np.int64)
        self._scales = np.asarray(scales, dtype=np.float32)
        self._length_scale = float(scales[1])  # the voice's pace; a faster rate divides it in place
        self._cluster_free = not config.vowel_clusters
        self._steps = {n: self._bind(ids) for n, ids in self._ids.items()}

    def _bind(self, ids: np.ndarray) -> BoundRun:
        # ``output`` is bound as None: its length (the sum of the predicted durations) is data
        # dependent, so ONNX Runtime cannot write it into a preallocated buffer and allocates it
        # per run (TensorRT: an output allocator; this engine cannot be captured in a CUDA graph).
        return self._engine.bind({"input": ids, "input_lengths": self._lengths, "scales": self._scales},
                                 {self._out: None}, host_outputs=(self._out,))

    def bucket(self, n: int) -> int:
        """The padded length for ``n`` ids: the smallest bucket that fits, else whole multiples of the largest."""
        for b in self._buckets:
            if n <= b:
                return b
        if not self._buckets:
            return n
        top = self._buckets[-1]
        return -(-n // top) * top

    def ids(self, phonemes: str) -> list[int]:
        """A sentence's IPA string (as :meth:`Espeak.phonemize` gives it) as phoneme ids."""
        phones = list(phonemes) if self._cluster_free else split_phonemes(phonemes, self.config.vowel_clusters)
        return phonemes_to_ids(phones, self.config.phoneme_id_map)

    def __call__(self, ids: list[int], rate: float = 1.0) -> np.ndarray:
        """Raw waveform for one sentence's ids: float32 [samples] at ``config.sample_rate``.

        ``rate`` > 1 speaks faster (phoneme durations / rate; the bound ``scales`` input is
        rewritten in place, so no rebinding).
        """
        out = self._run(ids, rate)
        return out.reshape(-1) if self.vocoder is None else self.vocoder.whole(out)

    def stream(self, ids: list[int], rate: float = 1.0) -> Iterator[tuple[np.ndarray, bool]]:
        """The raw waveform of one sentence as ``(samples, last)`` vocoder windows (a voice with a vocoder part)."""
        return self.vocoder.stream(self._run(ids, rate))

    def _run(self, ids: list[int], rate: float) -> np.ndarray:
        """The graph's output for ``ids``: the waveform, or the latent frames when this is a prior."""
        n = len(ids)
        size = self.bucket(n)
        buf, step = self._ids.get(size), self._steps.get(size)
        if buf is None:  # longer than every bucket (or no buckets): rare, allocate and bind for this call
            buf = np.zeros((1, size), dtype=np.int64)
            step = self._bind(buf)
        buf[0, :n] = ids
        buf[0, n:] = 0
        self._lengths[0] = n
        self._scales[1] = self._length_scale / rate
        step.run()
        return step.output(self._out)


class Tts:
    """Speech for every language of a pack: Piper voices first, espeak-ng's formant voice for the rest."""

    def __init__(self, voices: Mapping[str, PiperVoice], espeak: Espeak, formant_voices: Mapping[str, str],
                 options: TtsOptions = TtsOptions()):
        self._voices = dict(voices)
        self._espeak = espeak
        self._formant = {k: v for k, v in formant_voices.items() if k not in self._voices}
        self.options = options

    @classmethod
    def from_pack(cls, pack: BuiltPack, options: TtsOptions = TtsOptions(), *, engines: "EngineFactory") -> "Tts":
        """The pack's voices on the engines ``engines`` builds (see :mod:`edge_rt.backends.factory`)."""
        entry = pack.stage("tts")
        espeak = Espeak(pack.asset("tts", "espeak_lib"), pack.asset("tts", "espeak_data"), options.espeak_rate_wpm)
        buckets = tuple(entry.get("phoneme_buckets", DEFAULT_PHONEME_BUCKETS)) if options.bucketed else ()
        voices = {}
        for lang in entry.get("voices", {}):
            if options.voices is not None and lang not in options.voices:
                continue
            config_path = pack.asset("tts", f"{lang}_config")
            try:
                config = PiperVoiceConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as e:
                raise PackNotBuiltError(f"Piper voice config {config_path} is unusable ({e}); rebuild the pack") from e
            voices[lang] = _load_voice(pack, entry, lang, config, options, buckets, engines)
        return cls(voices, espeak, entry.get("formant_voices", {}), options)

    @property
    def languages(self) -> tuple[str, ...]:
        """Language codes it speaks: the Piper ones first, then espeak-ng's (e.g. "pt", "de", "zh")."""
        return (*sorted(self._voices), *sorted(self._formant))

    @property
    def piper_voices(self) -> Mapping[str, PiperVoice]:
        """The Piper voices by language."""
        return dict(self._voices)

    def engine(self, lang: str) -> str:
        """"piper" or "espeak": which synthesizer speaks ``lang``."""
        key = self._key(lang)
        return PIPER if key in self._voices else ESPEAK

    def sample_rate(self, lang: str) -> int:
        """Hz of the audio :meth:`synthesize` returns for ``lang``."""
        key = self._key(lang)
        return self._voices[key].config.sample_rate if key in self._voices else self._espeak.sample_rate

    def phonemize(self, text: str, lang: str) -> list[str]:
        """IPA per sentence, as the synthesizer of ``lang`` sees it."""
        key = self._key(lang)
        return self._espeak.phonemize(text, self._espeak_voice(key))

    def synthesize(self, text: str, lang: str) -> TtsAudio:
        """The whole text as one chunk (sentences back to back, as piper-tts writes them)."""
        key = self._key(lang)
        chunks = [a.samples for a in self._chunks(text, key, first_clause_alone=False)]
        samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        return TtsAudio(samples, self.sample_rate(key), self.engine(key), text)

    def clauses(self, text: str, lang: str, *, rate: float = 1.0, skip: int = 0) -> Iterator[TtsAudio]:
        """The speech of ``text`` clause by clause, each chunk synthesized only when asked for.

        One clause per sentence; with ``TtsOptions.stream_first_clause`` the first clause of a longer
        first sentence comes alone, so audio can start before the whole first sentence is synthesized.
        A Piper voice with a vocoder part streams each clause in several chunks (``TtsAudio.last``
        marks a clause's last one), the first ready after the prior and one short vocoder window.

        Args:
            rate: speaking rate, 1.0 = the voice's own pace, 1.25 = a quarter faster
                (Piper's length scale / rate; espeak-ng's words per minute x rate).
            skip: clauses left out at the start, never synthesized (the caller has their audio already).
        """
        if not 0.5 <= rate <= 2.0:
            raise ValueError(f"speaking rate must be within 0.5..2.0 (1.0 = the voice's pace), not {rate}")
        return self._chunks(text, self._key(lang), self.options.stream_first_clause, rate, skip, stream=True)

    def _chunks(self, text: str, key: str, first_clause_alone: bool, rate: float = 1.0,
                skip: int = 0, stream: bool = False) -> Iterator[TtsAudio]:
        voice = self._espeak_voice(key)
        sentences = self._espeak.sentences(text, voice, first_clause_alone=first_clause_alone) if text.strip() else []
        piper = self._voices.get(key)
        streamed = stream and piper is not None and piper.vocoder is not None
        level = 1.0 / piper.peak if streamed and self.options.normalize else 1.0
        for i, sentence in enumerate(sentences[skip:], start=skip):
            if streamed:
                for part, (samples, last) in enumerate(piper.stream(piper.ids(sentence.phonemes), rate)):
                    yield TtsAudio(np.clip(samples * level, -1.0, 1.0).astype(np.float32, copy=False),
                                   piper.config.sample_rate, PIPER, sentence.text if part == 0 else "", i, last)
            else:
                audio = self._speak(sentence, key, rate)
                yield TtsAudio(audio.samples, audio.sample_rate, audio.engine, audio.text, i)

    # -- internals ---------------------------------------------------------------------------------

    def _key(self, lang: str) -> str:
        key = lang.strip().lower().replace("_", "-")
        if key in self._voices or key in self._formant:
            return key
        raise UnsupportedLanguageError(
            f"no voice for language {lang!r}; this pack speaks: {', '.join(self.languages)}"
        )

    def _espeak_voice(self, key: str) -> str:
        return self._voices[key].config.espeak_voice if key in self._voices else self._formant[key]

    def _speak(self, sentence: EspeakSentence, key: str, rate: float = 1.0) -> TtsAudio:
        if key in self._voices:
            voice = self._voices[key]
            audio = voice(voice.ids(sentence.phonemes), rate)
            return TtsAudio(self._finish(audio), voice.config.sample_rate, PIPER, sentence.text)
        audio, sample_rate = self._espeak.synthesize(sentence.text, self._formant[key], rate)
        return TtsAudio(self._finish(audio), sample_rate, ESPEAK, sentence.text)

    def _finish(self, audio: np.ndarray) -> np.ndarray:
        """Peak-normalise (piper-tts's default) and clip to [-1, 1]."""
        if self.options.normalize and audio.size:
            peak = float(np.max(np.abs(audio)))
            audio = audio / peak if peak >= 1e-8 else np.zeros_like(audio)
        return np.clip(audio, -1.0, 1.0).astype(np.float32, copy=False)


def _load_voice(pack: BuiltPack, entry: dict, lang: str, config: PiperVoiceConfig, options: TtsOptions,
                buckets: tuple[int, ...], engines: "EngineFactory") -> PiperVoice:
    """A voice as its prior and vocoder where the pack has them (and streaming is on), else its whole graph."""
    meta = entry.get("voices", {}).get(lang, {})
    parts = entry.get("parts", {})
    if options.vocoder is not None and f"{lang}/vocoder" in parts and "stream_peak" in meta:
        prior = engines.load("tts", f"{lang}/prior", threads=options.threads)
        vocoder = Vocoder(engines.load("tts", f"{lang}/vocoder", threads=options.threads),
                          meta["stream_channels"], meta["stream_hop"], options.vocoder)
        return PiperVoice(prior, config, _scales(config, options), buckets, vocoder, meta["stream_peak"])
    engine = engines.load("tts", lang, precision=options.precision, threads=options.threads)
    return PiperVoice(engine, config, _scales(config, options), buckets)


def _scales(config: PiperVoiceConfig, o: TtsOptions) -> tuple[float, float, float]:
    """(noise_scale, length_scale, noise_w): the options over the voice's defaults."""
    length = config.length_scale if o.length_scale is None else o.length_scale
    if o.deterministic:
        return 0.0, length, 0.0
    noise = config.noise_scale if o.noise_scale is None else o.noise_scale
    noise_w = config.noise_w if o.noise_w is None else o.noise_w
    return noise, length, noise_w
