"""Named constants with units; derived sizes are checked at import."""

from __future__ import annotations


def exact_div(x: int, y: int) -> int:
    """``x // y``, raising if ``y`` does not divide ``x``."""
    if x % y:
        raise ValueError(f"{x} is not divisible by {y}")
    return x // y


SAMPLE_RATE = 16_000  # Hz: the loop's clock; every input is resampled to this
VAD_FRAME = 512  # samples per Silero VAD call (32 ms at 16 kHz)
VAD_CONTEXT = 64  # samples of the previous frame that Silero sees with each frame
VAD_FRAME_MS = exact_div(VAD_FRAME * 1000, SAMPLE_RATE)  # 32 ms

# Whisper front end
N_FFT = 400  # 25 ms window
HOP_LENGTH = 160  # 10 ms hop
N_MELS = 80
CHUNK_LENGTH = 30  # s: Whisper's full window
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000 samples
N_FRAMES = exact_div(N_SAMPLES, HOP_LENGTH)  # 3000 mel frames
FRAMES_PER_SECOND = exact_div(SAMPLE_RATE, HOP_LENGTH)  # 100 mel frames/s
ENCODER_STRIDE = 2  # conv2 stride: mel frames per encoder position
WHISPER_BUCKETS_S = (5, 10, 15, 20, 30)  # static encoder windows, seconds
MAX_TEXT_CTX = 448  # decoder positions (fixed-size self-attention KV cache)


def bucket_frames(seconds: int) -> int:
    """Mel frames of a ``seconds``-long encoder window (even, for the stride-2 conv)."""
    return exact_div(seconds * SAMPLE_RATE, HOP_LENGTH)


def bucket_positions(seconds: int) -> int:
    """Encoder positions of a ``seconds``-long window."""
    return exact_div(bucket_frames(seconds), ENCODER_STRIDE)
