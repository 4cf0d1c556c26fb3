"""Has the speaker paused while a partial caption decodes? Judged from the newest unread capture audio.

The worker decodes a partial caption synchronously (a few hundred ms here); the VAD does not see
the audio that arrives meanwhile. When a pause begins during that decode, the speculation (and so
the end of the turn) waits for a caption nobody needs any more: replaying the 33 real clips live with
``bench``'s settings, a partial was still running at the end of speech for 26 of 64 utterance ends, and
ran on for 13-962 ms (median ~200 ms) after it; with this watch, 18 of 62, 11 of them stopped
(10-561 ms, median ~120 ms).

:class:`PauseWatch` is the ``stop`` the loop hands to such a decode (``Asr.transcribe(stop=...)``,
asked before the encoder and before each decoder step): it peeks at the newest ``window`` samples
of the capture ring, without consuming them, and says "paused" when they are ``drop_db`` below
the speech being decoded (its loud frames). The worst a wrong "paused" does is cost one caption
refresh (the next partial comes at its usual interval); after a right one the VAD reads the backlog
and the speculation starts at once. In noise the level does not fall that far in a pause, and the
decode runs to its end as before.

The encoder run is one engine call; on ONNX Runtime it is interrupted too: the run watcher
(``backends/interrupt.py``) asks the same watch from its own thread every 5 ms while the worker
waits in the run, and sets ``RunOptions.terminate``. The watch only peeks at the capture ring (which
the audio callback writes and nobody consumes while the worker is inside the run) and its own buffer.
"""

from __future__ import annotations

import numpy as np

from edge_rt.audio.ring import Ring
from edge_rt.stages.gain import frame_rms
from edge_rt.units import VAD_FRAME

__all__ = ["PauseWatch", "ResumeWatch", "speech_level"]


def speech_level(audio: np.ndarray, quantile: float = 0.9) -> float:
    """RMS of the loud VAD frames of ``audio`` (the ``quantile`` of the per-frame RMS, as the automatic
    gain's speech level over its 20 ms frames): the level a pause is measured against (0.0 for less
    than one frame)."""
    rms = frame_rms(audio, VAD_FRAME)
    return float(np.quantile(rms, quantile)) if len(rms) else 0.0


class PauseWatch:
    """Called (``watch()``), True once the newest ``window`` captured samples, all captured after
    :meth:`arm`, are ``drop_db`` below the armed speech level."""

    def __init__(self, ring: Ring, window: int, drop_db: float):
        if window < 1 or drop_db <= 0:
            raise ValueError(f"PauseWatch needs window >= 1 sample and drop_db > 0, got {window} and {drop_db}")
        self._ring = ring
        self._buf = np.zeros(window, np.float32)
        self._factor = 10.0 ** (-drop_db / 20.0)
        self._limit = 0.0
        self._after = 0

    def arm(self, level: float, captured: int) -> "PauseWatch":
        """Watch for a pause below ``level`` (RMS; see :func:`speech_level`) in audio captured from
        sample ``captured`` on (what the decode has not seen)."""
        self._limit = level * self._factor
        self._after = captured
        return self

    def __call__(self) -> bool:
        ring, buf = self._ring, self._buf
        if self._limit <= 0.0 or ring.written - self._after < len(buf):
            return False  # no speech level to fall from, or not a whole window of new audio yet
        return ring.peek_newest(buf) == len(buf) and self.quiet(buf)

    def quiet(self, window: np.ndarray) -> bool:
        """Is ``window`` (float32 samples) below the armed level?"""
        return float(np.sqrt(np.dot(window, window) / max(len(window), 1))) < self._limit


class ResumeWatch(PauseWatch):
    """The other way round, for work done *in* a pause (the loop's transcript for a held pause's end mark,
    TurnOptions.source_mark_langs): True once the newest ``window`` samples captured after :meth:`arm` stand
    ``drop_db`` above the pause's own level: the speaker has resumed, and the work is for nothing. Measured against
    the pause, not the speech, so it also works in steady noise. A wrong "resumed" costs what the work would have
    given; a missed one, the rest of that work."""

    def arm(self, level: float, captured: int) -> "ResumeWatch":
        """Watch for sound ``drop_db`` above ``level`` (the pause's RMS so far; -80 dBFS at least, so that
        digital silence has a level to rise from) in audio captured from sample ``captured`` on."""
        self._limit = max(level, 1e-4) / self._factor
        self._after = captured
        return self

    def __call__(self) -> bool:
        ring, buf = self._ring, self._buf
        if ring.written - self._after < len(buf):
            return False  # not a whole window of new audio yet
        return ring.peek_newest(buf) == len(buf) and not self.quiet(buf)
