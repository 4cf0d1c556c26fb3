"""Options of the real-time loop: one frozen dataclass, validated on creation."""

from __future__ import annotations

from dataclasses import dataclass, field

from edge_rt.loop.endpoint import EndpointOptions
from edge_rt.loop.overload import OverloadOptions
from edge_rt.stages.gain import GainOptions

__all__ = ["LoopOptions"]


@dataclass(frozen=True)
class LoopOptions:
    target: str  # language to speak
    source: str | None = None  # None: detect per utterance
    endpoint: EndpointOptions = field(default_factory=EndpointOptions)
    partials: bool = True  # re-decode the growing utterance for live captions and the stable prefix
    partial_interval_ms: int = 960  # how often a partial is decoded
    # Speculation: once speech pauses for this long, decode and translate the utterance so far and
    # synthesize its first clause; if the pause becomes the end, that work is reused (None: off).
    speculate_after_ms: int | None = 64
    # ... and when that hypothesis is a complete sentence (ends in . ? !), end the utterance
    # right there instead of waiting for the whole hangover. Off by default: Whisper ends
    # almost every fragment with a period, and committing there split sentences (English WER
    # 6.2 % -> 9.8 % on the real clips, see the README's latency section).
    early_commit: bool = False
    min_commit_words: int = 2  # a one-word "sentence" is not trusted to be complete
    min_partial_s: float = 1.0  # no partial before this much speech
    overload: OverloadOptions = field(default_factory=OverloadOptions)  # what to shed when compute falls behind
    gain: GainOptions | None = field(default_factory=GainOptions)  # automatic gain of each utterance before ASR
    # Whisper writes fluent text for background talk (babble) it is unsure of. An utterance with
    # P(no speech) above the first value AND average log-probability below the second is not translated.
    # Stricter than Whisper's own (0.6, -1.0): on the speech set only garbage fragments fall under it.
    unsure: tuple[float, float] | None = (0.15, -0.7)
    # A stage error drops its utterance and the loop goes on; this many in a row means the stage is
    # broken, not unlucky: the error goes up (the service exits and systemd restarts it).
    max_consecutive_errors: int = 5
    keep_traces: int | None = None  # Loop.traces keeps the last N (None: all; an always-on service bounds it)
    idle_sleep_s: float = 0.004  # wait when no hop is ready

    def __post_init__(self):
        if self.partial_interval_ms < 100:
            raise ValueError(f"partial_interval_ms must be >= 100, got {self.partial_interval_ms}")
        if self.unsure is not None and not (0 <= self.unsure[0] < 1 and self.unsure[1] < 0):
            raise ValueError(f"unsure must be (P(no speech) in [0, 1), average log-probability < 0) or None, "
                             f"got {self.unsure}")
        if self.max_consecutive_errors < 1:
            raise ValueError(f"max_consecutive_errors must be >= 1, got {self.max_consecutive_errors}")
        if self.keep_traces is not None and self.keep_traces < 1:
            raise ValueError(f"keep_traces must be >= 1 or None (keep all), got {self.keep_traces}")
        if self.speculate_after_ms is not None and self.speculate_after_ms >= self.endpoint.hangover_ms:
            raise ValueError(f"speculate_after_ms ({self.speculate_after_ms}) must be shorter than the hangover "
                             f"({self.endpoint.hangover_ms} ms), or None to turn speculation off")
