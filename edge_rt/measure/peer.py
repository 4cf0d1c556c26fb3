"""``bench --peer``: the stack people assemble from packages, on the same weights, in the same run.

faster-whisper 1.2.1 (CTranslate2, int8 compute, its Silero ``vad_filter``) on the
pack's own Whisper weights, the same Marian translation (edge_rt's Translator),
and piper-tts 1.8 on the pack's Piper voice for English / espeak-ng for
Portuguese (the same formant voice the loop uses). Its turn latency is measured
like the serial baseline's: its own end-of-speech wait (faster-whisper's VAD
``min_silence_duration_ms``: the silence it needs to call a segment over) plus
the compute up to the first synthesized sentence, plus that sentence's lead of
near-silence before its first sound (the loop is timed to its first sound too).

Choices that favour the peer, so its speed-up is not inflated: greedy decoding
(faster-whisper's default is a 5-beam search) without its temperature fall-back
(which re-decodes a doubtful window up to 5 times with sampling: 16 s on
fr_fleurs_ski; edge_rt's decoder is greedy-only too), no timestamps, and the
source language is given (no detection).

Needs the dev extra (``pip install -e .[dev]``) and the pack's acquired wheels
in the cache (they are there after a build).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_rt.errors import EdgeRtError
from edge_rt.measure.serial import SerialTurn, lead_ms
from edge_rt.stages.asr.tokenizer import has_words

__all__ = ["PeerReply", "PeerStack"]

TIME_PRECISION = 0.02  # s per Whisper timestamp token (the CTranslate2 vocabulary lists them)


def _require(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise EdgeRtError(f"bench --peer needs {module} (faster-whisper, piper-tts): "
                          f"pip install -e '.[dev]'") from e


def _ct2_dir(files: dict[str, Path], n_vocab: int, dest: Path) -> Path:
    """A CTranslate2 Whisper folder: links to the pack's model.bin/config/tokenizer + a rebuilt vocabulary.json
    (CTranslate2 needs it; packs ship tokenizer.json only). Same as tests/whisper_reference.py."""
    from tokenizers import Tokenizer

    dest.mkdir(parents=True, exist_ok=True)
    for name, key in (("model.bin", "model"), ("config.json", "config"), ("tokenizer.json", "tokenizer")):
        link = dest / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path(files[key]).resolve())
    vocab = Tokenizer.from_file(str(files["tokenizer"])).get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    tokens += [f"<|{k * TIME_PRECISION:.2f}|>" for k in range(n_vocab - len(tokens))]
    (dest / "vocabulary.json").write_text(json.dumps(tokens))
    return dest


@dataclass(frozen=True)
class PeerReply:
    """What the package stack says back to one stretch of speech (:meth:`PeerStack.reply`)."""

    lang: str  # the language faster-whisper detected
    heard: str  # its transcript (a translate route: its English translation)
    said: str  # the text it speaks
    audio: np.ndarray = field(repr=False)  # that speech, float32 16 kHz (empty when it says nothing)
    compute_ms: float  # detection, decode, translation and synthesis of all of it


class PeerStack:
    """Load once with :meth:`load`; :meth:`turn` measures one utterance, :meth:`reply` answers one stretch of
    speech whole (``bench --loudspeaker --peer``: measure/peer_echo.py)."""

    def __init__(self, whisper, piper_voices: dict, stages, wait_ms: float):
        self._whisper, self._piper, self._stages, self.wait_ms = whisper, piper_voices, stages, wait_ms

    @classmethod
    def load(cls, pack, stages, threads: int = 2, wait_ms: float | None = None) -> "PeerStack":
        """The peer stack on ``pack``'s weights; MT and espeak-ng are ``stages``' own."""
        fw = _require("faster_whisper")
        piper = _require("piper")
        # The raw (pre-export) weights live in the acquisition cache; acquire() only verifies them there.
        from edge_rt.build.packs import PackSpec, acquire, cache_dir

        acq = acquire(PackSpec.load(pack.name))
        files = {k: Path(acq.path("asr", k)) for k in ("model", "config", "tokenizer")}
        model_dir = _ct2_dir(files, pack.stage("asr")["dims"]["n_vocab"], cache_dir() / "peer" / pack.name / "ct2")
        whisper = fw.WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads)
        voices = {}
        tts = pack.stage("tts")
        for lang in tts.get("voices", {}):
            voices[lang] = piper.PiperVoice.load(acq.path("tts", f"{lang}_model"), acq.path("tts", f"{lang}_config"))
        if wait_ms is None:
            from faster_whisper.vad import VadOptions

            wait_ms = float(VadOptions().min_silence_duration_ms)
        peer = cls(whisper, voices, stages, wait_ms)
        peer._warm_up()
        return peer

    def _warm_up(self) -> None:
        """First calls allocate: not part of any turn."""
        segments, _ = self._whisper.transcribe(np.zeros(16000, np.float32), language="en", beam_size=1)
        list(segments)
        for voice in self._piper.values():
            next(iter(voice.synthesize("Hello.")), None)

    def segments(self, audio: np.ndarray, lang: str | None = None) -> list[tuple[float, float, str]]:
        """faster-whisper on a whole recording, as a user would call it (``eval --noise``): its Silero
        ``vad_filter``, greedy, no temperature fall-back, timestamps on (its default: they place each
        segment, which tells invented text in noise-only stretches). ``lang`` None: it detects.

        Returns (start s, end s, text) per segment, on the recording's own timeline.
        """
        segments, _ = self._whisper.transcribe(audio, language=lang, beam_size=1, temperature=0.0,
                                               without_timestamps=False, vad_filter=True)
        return [(float(s.start), float(s.end), s.text.strip()) for s in segments]

    def turn(self, audio: np.ndarray, end: int, lang: str, target: str) -> SerialTurn:
        """Whisper (vad_filter) over ``audio[:end]`` in ``lang``, then MT, then the first sentence of speech."""
        route = self._stages.route(lang, target)
        t0 = time.perf_counter()
        segments, _ = self._whisper.transcribe(audio[:end], language=lang, task=route.asr_task, beam_size=1,
                                               temperature=0.0, without_timestamps=True, vad_filter=True)
        text = " ".join(s.text.strip() for s in segments).strip()
        t1 = time.perf_counter()
        if text and route.mt_pair:
            text = self._stages.mt.translate(text, *route.mt_pair)
        t2 = time.perf_counter()
        first = None
        if has_words(text):
            if target in self._piper:
                chunk = next(iter(self._piper[target].synthesize(text)), None)
                first = None if chunk is None else (chunk.audio_float_array, chunk.sample_rate)
            else:  # espeak-ng, the formant voice the loop speaks this language with
                clause = next(iter(self._stages.tts.clauses(text, target)), None)
                first = None if clause is None else (clause.samples, clause.sample_rate)
        t3 = time.perf_counter()
        # timed to its first sound, as the loop is: it plays its first chunk's lead (SerialTurn.lead_ms)
        return SerialTurn(self.wait_ms, (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000, text,
                          lead_ms=lead_ms(*first) if first is not None else 0.0)

    def reply(self, audio: np.ndarray, target: str) -> PeerReply:
        """``audio`` (float32 16 kHz, one stretch the stack's VAD cut) answered as a live stack from these packages
        answers it: faster-whisper detects the language (a live stack is not told), decodes it greedily with the
        route's task, the same MT translates, piper-tts (English) or espeak-ng speaks all of it. The same routes as
        the loop: speech already in ``target`` is said again as heard."""
        from edge_rt.audio.files import resample
        from edge_rt.errors import UnsupportedLanguageError

        t0 = time.perf_counter()
        lang = self._whisper.detect_language(audio)[0]
        try:
            route = self._stages.route(lang, target)
        except UnsupportedLanguageError:  # a language the pack cannot recognise: nothing said
            return PeerReply(lang, "", "", np.zeros(0, np.float32), (time.perf_counter() - t0) * 1000)
        segments, _ = self._whisper.transcribe(audio, language=lang, task=route.asr_task, beam_size=1,
                                               temperature=0.0, without_timestamps=True, vad_filter=False)
        heard = " ".join(s.text.strip() for s in segments).strip()
        said = self._stages.mt.translate(heard, *route.mt_pair) if heard and route.mt_pair else heard
        speech = np.zeros(0, np.float32)
        if has_words(said):
            if target in self._piper:
                chunks = list(self._piper[target].synthesize(said))
                rate = chunks[0].sample_rate if chunks else 16000
                samples = np.concatenate([c.audio_float_array for c in chunks]) if chunks else speech
            else:
                tts = self._stages.tts.synthesize(said, target)
                samples, rate = tts.samples, tts.sample_rate
            speech = resample(np.asarray(samples, np.float32), rate)
        return PeerReply(lang, heard, said, speech, (time.perf_counter() - t0) * 1000)
