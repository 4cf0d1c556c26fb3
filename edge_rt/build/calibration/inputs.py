"""What each model sees at run time, produced from the calibration set by the stage code itself.

A *drive* runs one stage over calibration data with one of its engines wrapped (see
:class:`~edge_rt.build.calibration.calibrate.CalibratingEngine`); the wrapper records every call:

* Whisper encoder: log-mel windows of every bucket (utterances of 1-5 s in the 5-s
  bucket, 5-10 s in the 10-s bucket, ...), cut exactly as ``Asr.transcribe`` cuts them;
* Whisper decoder: every step of greedy decoding of calibration utterances;
* Marian encoder / decoder: source buckets and decoder steps while translating the
  calibration sentences (English for en-pt, Portuguese for pt-en);
* Piper: phoneme ids of calibration sentences, padded to the pack's buckets;
* Silero VAD: 512-sample frames with context and the carried LSTM state.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from edge_rt.build.calibration.audio import AudioRecipe, AudioSet, Voice, load_or_build
from edge_rt.build.calibration.corpus import Corpus, load_corpus
from edge_rt.build.calibration.calibrate import CalibrationError, CollectorFull
from edge_rt.build.calibration.stage_view import StageView
from edge_rt.units import SAMPLE_RATE, bucket_frames

__all__ = ["CalibrationData", "Drives", "ESPEAK_VOICES"]

# espeak-ng voices (name, corpus language, words per minute) reading the corpus; missing ones are skipped.
ESPEAK_VOICES = (("en-us", "en", 175), ("en", "en", 150), ("en-us", "en", 230), ("pt-BR", "pt", 175),
                 ("pt", "pt", 160), ("es", "pt", 175), ("fr", "pt", 175), ("de", "en", 165))
PIPER_LENGTH_SCALES = (0.85, 1.0, 1.2)
# Encoder windows per bucket (seconds -> count). Histogram updates dominate the cost (~100 tensors a
# window), so long buckets get few windows; all buckets share one set of ranges.
ENCODER_WINDOWS = {5: 32, 10: 10, 15: 4, 20: 3, 30: 2}
SPEECH_KINDS = ("speech", "speech_music", "plosives")  # what passes the VAD
SHUFFLE_SEED = 7  # the audio set is stored grouped by kind; drives read it in a fixed shuffled order

Wrap = Callable[[object], object]


@dataclass(frozen=True)
class CalibrationData:
    """The audio sets and the corpora of one build."""

    audio: AudioSet
    held_out: AudioSet
    corpora: dict[str, Corpus]

    @property
    def key(self) -> str:
        return f"{self.audio.key}:{self.held_out.key}:" + ":".join(c.sha256 for c in self.corpora.values())

    def shuffled(self) -> list:
        order = np.random.default_rng(SHUFFLE_SEED).permutation(len(self.audio))
        return [self.audio.samples[i] for i in order]

    @classmethod
    def prepare(cls, view: StageView, cache: Path, recipe: AudioRecipe = AudioRecipe(),
                progress: Callable[[str, int, int], None] | None = None) -> "CalibrationData":
        """Load the corpora and generate (or load from ``cache``) the calibration and held-out audio."""
        corpora = {lang: load_corpus(lang) for lang in ("en", "pt")}
        voices = pack_voices(view)
        hashes = [c.sha256 for c in corpora.values()]
        sets = []
        for held_out, n in ((False, recipe.n_samples), (True, recipe.n_held_out)):
            sentences = {lang: (c.held_out if held_out else c.calibration) for lang, c in corpora.items()}
            label = "held-out audio" if held_out else "calibration audio"
            cb = (lambda i, label=label, n=n: progress(label, i, n)) if progress else None
            sets.append(load_or_build(cache, recipe, voices, sentences, hashes, held_out, cb))
        if len(sets[0]) == 0:
            raise CalibrationError("the calibration audio set is empty: check AudioRecipe.n_samples")
        return cls(sets[0], sets[1], corpora)


def pack_voices(view: StageView) -> list[Voice]:
    """The pack's Piper voice(s) at three speaking rates, and the espeak-ng voices that work."""
    from edge_rt.errors import UnsupportedLanguageError
    from edge_rt.stages.tts.espeak import Espeak

    voices: list[Voice] = []
    entry = view.stages["tts"]
    for lang, info in entry.get("voices", {}).items():
        engine = view.engine("tts", lang)
        for scale in PIPER_LENGTH_SCALES:
            tts = view.tts({lang: engine}, length_scale=scale)

            def speak(text: str, tts=tts, lang=lang):
                a = tts.synthesize(text, lang)
                return a.samples, a.sample_rate

            voices.append(Voice(f"piper:{info['name']}@{scale}:{info.get('sha256', '')[:12]}", lang.split("-")[0], speak))
    pack = view.pack
    lib, data = pack.asset("tts", "espeak_lib"), pack.asset("tts", "espeak_data")
    for name, lang, wpm in ESPEAK_VOICES:
        espeak = Espeak(lib, data, wpm)
        try:
            if not espeak.phonemize("1 2 3", name):
                continue
        except UnsupportedLanguageError:
            continue

        def speak(text: str, espeak=espeak, name=name):
            return espeak.synthesize(text, name)

        voices.append(Voice(f"espeak:{name}@{wpm}", lang, speak))
    return voices


def _concat_to(samples: Sequence, start: int, seconds: float) -> tuple[np.ndarray, int]:
    """Consecutive samples from ``start`` joined (0.2-s gaps) and cut to ``seconds``; returns (audio, next)."""
    need = int(seconds * SAMPLE_RATE)
    parts, n, i = [], 0, start
    gap = np.zeros(int(0.2 * SAMPLE_RATE), np.float32)
    while n < need:
        a = samples[i % len(samples)].audio
        parts += [a, gap]
        n += len(a) + len(gap)
        i += 1
    return np.concatenate(parts)[:need], i


class Drives:
    """One drive per model name; ``run(stage, model, wrap)`` feeds the wrapped engine until done or full."""

    def __init__(self, view: StageView, data: CalibrationData):
        self.view = view
        self.data = data

    def run(self, stage: str, model: str, wrap: Wrap) -> None:
        fn = {"asr": self._asr, "mt": self._mt, "tts": self._tts, "vad": self._vad}[stage]
        try:
            fn(model, wrap)
        except CollectorFull:
            pass

    # -- Whisper ---------------------------------------------------------------------------------
    def _asr(self, model: str, wrap: Wrap) -> None:
        from edge_rt.stages.asr import mel as melmod
        v = self.view
        samples = self.data.shuffled()
        if model == "encoder":
            # At run time the encoder sees what the VAD let through: speech, possibly over noise or music.
            samples = [s for s in samples if s.kind in SPEECH_KINDS] or samples
            enc = wrap(v.engine("asr", "encoder"))
            buckets = sorted(int(b) for b in v.stages["asr"]["buckets_s"])
            rng = np.random.default_rng(SHUFFLE_SEED)
            pos, lower = 0, 1.0
            for b in buckets:
                for _ in range(ENCODER_WINDOWS.get(b, 2)):
                    audio, pos = _concat_to(samples, pos, rng.uniform(lower, b))
                    mel = melmod.log_mel(audio)
                    enc.run({"mel": melmod.window(mel, 0, bucket_frames(b))})
                lower = float(b)
            return
        asr = v.asr(v.engine("asr", "encoder"), wrap(v.engine("asr", "decoder")), silence_peak=None)
        speech = [s for s in samples if s.kind in SPEECH_KINDS]
        if not speech:
            raise CalibrationError("the calibration set holds no speech; the Whisper decoder cannot be calibrated")
        lang = None if asr.multilingual else "en"
        for s in speech:
            asr.transcribe(s.audio, language=lang)

    # -- Marian ----------------------------------------------------------------------------------
    def _mt(self, model: str, wrap: Wrap) -> None:
        pair, part = model.split("/")
        v = self.view
        enc, dec = v.engine("mt", f"{pair}/encoder", threads=1), v.engine("mt", f"{pair}/decoder", threads=1)
        direction = v.marian(pair, wrap(enc) if part == "encoder" else enc, wrap(dec) if part == "decoder" else dec)
        src = pair.split("-")[0]
        if src not in self.data.corpora:
            raise CalibrationError(f"no calibration corpus for {src!r} (pair {pair}); add calibration/sentences_{src}.txt")
        for sentence in self.data.corpora[src].calibration:
            direction.translate(sentence)

    # -- Piper -----------------------------------------------------------------------------------
    def _tts(self, lang: str, wrap: Wrap) -> None:
        v = self.view
        tts = v.tts({lang: wrap(v.engine("tts", lang))})
        corpus = self.data.corpora.get(lang.split("-")[0])
        if corpus is None:
            raise CalibrationError(f"no calibration corpus for the Piper voice's language {lang!r}")
        for sentence in corpus.calibration:
            for _ in tts.clauses(sentence, lang):
                pass

    # -- Silero ----------------------------------------------------------------------------------
    def _vad(self, model: str, wrap: Wrap) -> None:
        vad = self.view.vad(wrap(self.view.engine("vad", model, threads=1)))
        for s in self.data.shuffled():
            vad.probabilities(s.audio)
