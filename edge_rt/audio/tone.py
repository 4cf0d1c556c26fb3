"""The ready tone: a short rising sweep the loop plays when it starts in loudspeaker mode.

A kiosk's echo canceller has heard nothing of its loudspeaker at start. WebRTC's AEC3, with no estimate of
the echo path yet, takes the near end down under the first far end it plays as if it were double talk: a
speaker still talking when our first translation starts lost ~19-25 dB of their voice under it (offline,
tools/ready_tone.py). A sweep played once at start, heard through the loudspeaker, gives AEC3 that estimate
before anyone talks: a sweep excites every band the echo path has, as in impulse-response measurement.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ready_tone"]

_FADE_S = 0.02  # raised-cosine fade in and out: no click at either end


def ready_tone(rate: int, ms: int, level_db: float = -20.0, f0: float = 200.0, f1: float = 6000.0) -> np.ndarray:
    """A logarithmic sweep from ``f0`` to ``f1`` Hz, ``ms`` long, at ``level_db`` dBFS RMS, float32 at ``rate``."""
    if ms <= 0:
        return np.zeros(0, np.float32)
    f1 = min(f1, 0.45 * rate)
    n = int(rate * ms / 1000)
    t = np.arange(n) / rate
    k = np.log(f1 / f0) / (n / rate)
    x = np.sin(2 * np.pi * f0 * np.expm1(k * t) / k)
    f = min(int(_FADE_S * rate), n // 2)
    if f:
        ramp = np.sin(0.5 * np.pi * np.arange(f) / f) ** 2
        x[:f] *= ramp
        x[n - f :] *= ramp[::-1]
    x *= 10 ** (level_db / 20) / max(float(np.sqrt(np.mean(x**2))), 1e-12)
    return x.astype(np.float32)
