"""Real English clips cut at a word boundary inside a sentence, and where each clip's speech ends:
shared by the end-of-turn model's test and Whisper's end-mark test."""

from __future__ import annotations

import numpy as np

from edge_rt.units import SAMPLE_RATE, VAD_FRAME

PAUSE = np.zeros(int(0.15 * SAMPLE_RATE), np.float32)  # 150 ms of silence after the last word heard

# Cuts inside a sentence at a word boundary, after a word that cannot end an English sentence
# (determiner, preposition, conjunction, auxiliary). Found by cutting at the quietest 20 ms between
# words and transcribing the prefix with the tiny pack's Whisper; every such cut on these clips
# is listed (cuts inside a word or after a word that may end a sentence were left out).
MID_SENTENCE = [
    ("en_librispeech_1089-134686-0000", 1.33, "he hoped there would"),
    ("en_librispeech_1089-134686-0000", 3.25, "... stew for dinner turnips and"),
    ("en_librispeech_1089-134686-0000", 4.01, "... turnips and carrots and"),
    ("en_librispeech_1089-134691-0001", 1.57, "for a full hour he had"),
    ("en_librispeech_1995-1837-0001", 3.19, "... sorrow of his life it was not"),
    ("en_librispeech_1995-1837-0001", 4.39, "... so much the loss of the"),
    ("en_fleurs_1675", 7.01, "... even in the middle of"),
    ("en_fleurs_1938", 5.69, "... including separating the"),
    ("en_fleurs_1846", 2.39, "the aspect ratio of this"),
    ("en_fleurs_1846", 4.19, "... format dividing by"),
]


def speech_end(vad, audio: np.ndarray) -> int:
    """Sample index just after the last 32-ms frame the VAD calls speech."""
    frames = np.flatnonzero(vad.probabilities(audio) > 0.5)
    return int(frames[-1] + 1) * VAD_FRAME
