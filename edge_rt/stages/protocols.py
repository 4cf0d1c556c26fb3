"""The small protocols the loop talks to: one per stage, whatever model or backend is behind it.

The loop (:mod:`edge_rt.loop`) and the measurements depend on these, never on Whisper, Marian,
Piper, ONNX Runtime or TensorRT. The implementations (``stages/vad.py``, ``stages/turn.py``, ``stages/asr/``,
``stages/mt/``, ``stages/tts/``) receive their engines from a
:class:`~edge_rt.backends.factory.EngineFactory`; no stage constructs a backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # the result types live with their implementations
    from edge_rt.stages.asr.whisper import AsrResult, Prompt
    from edge_rt.stages.tts.voice import TtsAudio

__all__ = ["Asr", "Translator", "Tts", "Turn", "Vad"]


@runtime_checkable
class Vad(Protocol):
    """Speech probability of each 32 ms frame, streaming."""

    def reset(self) -> None:
        """Forget the recurrent state (start of a new stream)."""
        ...

    def __call__(self, frame: np.ndarray) -> float:
        """float32 [512] at 16 kHz -> speech probability in [0, 1]."""
        ...

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """Per-frame probabilities of a whole clip (offline use: eval, bench's oracle)."""
        ...


@runtime_checkable
class Turn(Protocol):
    """Whether the speaker has finished their turn, judged from the audio itself (end-of-turn model)."""

    def probability(self, audio: np.ndarray) -> float:
        """float32 [n] mono 16 kHz, the utterance so far -> P(turn complete) in [0, 1]."""
        ...


@runtime_checkable
class Asr(Protocol):
    """Speech -> text (and X -> English translation where the model can)."""

    @property
    def languages(self) -> Sequence[str]: ...

    @property
    def multilingual(self) -> bool: ...

    def transcribe(self, audio: np.ndarray, *, language: str | Callable[[str, float], str] | None = None,
                   task: str | Callable[[str], str] = "transcribe", prompt: "str | Prompt | None" = None,
                   languages: "Sequence[str] | None" = None,
                   stop: "Callable[[], bool] | None" = None) -> "AsrResult":
        """float32 [n] mono 16 kHz -> text, language and decoding statistics. ``language``: a code, None
        (detect) or a function of the detected (code, probability); ``prompt``: previous text to
        condition on (optional: None is what a model without context support gets); ``languages``:
        the codes detection chooses among (None: any); ``stop``: asked during the decode, True abandons
        it by raising (the loop passes it only to partial captions, and only when
        ``LoopOptions.partial_stop_db`` is set)."""
        ...


@runtime_checkable
class Translator(Protocol):
    """Text in one language -> text in another."""

    @property
    def pairs(self) -> Sequence[str]:
        """``"src-tgt"`` codes, e.g. ``("en-pt", "pt-en")``."""
        ...

    def translate(self, text: str, src: str, tgt: str) -> str: ...


@runtime_checkable
class Tts(Protocol):
    """Text -> speech, clause by clause."""

    @property
    def languages(self) -> Sequence[str]: ...

    def sample_rate(self, lang: str) -> int: ...

    def synthesize(self, text: str, lang: str) -> "TtsAudio": ...

    def clauses(self, text: str, lang: str, *, rate: float = 1.0, skip: int = 0) -> Iterator["TtsAudio"]:
        """One chunk per sentence (the first clause alone where the options say so), lazily;
        ``rate`` > 1 speaks faster, ``skip`` leaves out (never synthesizes) the first chunks."""
        ...
