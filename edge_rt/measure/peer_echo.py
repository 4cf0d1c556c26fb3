"""The package stack beside a loudspeaker (``bench --loudspeaker --peer``): faster-whisper + the same MT +
piper-tts / espeak-ng when their own speech comes back into the microphone.

A stack assembled from those packages has no echo canceller. It listens all the time, or, once its owner has
heard it answer itself, mutes its microphone while it speaks (``listens_while_speaking=False``: half duplex, deaf
to a person who talks over it). This module plays that stack's part on one clip's
timeline, as ``bench`` runs the loop in loudspeaker mode: :data:`~edge_rt.measure.bench.LOUDSPEAKER_LEAD` of
silence, the clip, then ``window_s`` more, the stack's replies fed back through the same
:class:`~edge_rt.audio.echo_path.EchoPath` (6 dB down, 40 ms late):

1. faster-whisper's Silero VAD (its ``vad_filter``: ``get_speech_timestamps`` with its defaults) over what the
   microphone has heard so far; the first stretch after the previous one is over once ``min_silence_duration_ms``
   (2 s) of silence follows its last speech;
2. the stack answers it whole (:meth:`PeerStack.reply`: language detected, decoded, translated, all of it
   synthesized) and its speech starts that much compute time later (measured here);
3. that speech, 6 dB down and 40 ms late, is added to what the microphone hears next.

The stack does one thing at a time, as a simple one does: a stretch cut while it still works on the one before
waits for it, and a reply ready while the one before still plays is played after it. A stretch that starts after
the clip's last speech is made of the stack's own voice: nothing else sounds there. Not simulated: the room's
reverberation. Replies past the window are not heard back, so the count of its own voice is a floor.
"""

from __future__ import annotations

import hashlib

from dataclasses import asdict, dataclass

import numpy as np

from edge_rt.audio.echo_path import EchoPath
from edge_rt.loop.onset import first_sound
from edge_rt.units import SAMPLE_RATE, VAD_FRAME

__all__ = ["PeerEchoTurn", "own_voice_turns", "peer_echo_run", "peer_turn_ms"]


@dataclass(frozen=True)
class PeerEchoTurn:
    """One stretch the stack's VAD cut, and what it said back; samples of the run's timeline (lead + clip + window)."""

    start: int  # the stretch as its VAD padded it (``speech_pad_ms`` each side)
    end: int
    cut: int  # where the stretch was over (its last speech + the VAD's minimum silence)
    # where its reply starts to sound: its first sample, then ``lead`` samples of near-silence (None: it said
    # nothing, or only after the window)
    played: int | None
    lang: str
    heard: str
    said: str
    own_voice: bool  # the stretch began after the clip's last speech: the stack heard itself
    lead: int = 0  # its reply's samples before their first sound (over -60 dBFS, loop/onset.py), played as they come

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("start", "end", "cut", "played", "lead"):
            d[k] = None if d[k] is None else round(d[k] / SAMPLE_RATE, 3)  # seconds
        return d


def peer_echo_run(peer, clip: np.ndarray, end: int, target: str, echo: EchoPath | None, lead: int,
                  window_s: float, max_turns: int = 8, listens_while_speaking: bool = True,
                  replies: dict | None = None) -> list[PeerEchoTurn]:
    """The package stack ``peer`` (:class:`~edge_rt.measure.peer.PeerStack`) on ``clip`` (float32 16 kHz) after
    ``lead`` samples of silence and before ``window_s`` s more, its replies heard back through ``echo`` (None: a
    headset, nothing heard back). ``end``: the clip's last speech sample (the bench's oracle end).

    ``listens_while_speaking`` False: the stack a user builds once it has heard itself, which mutes its microphone
    while it speaks (half duplex): it hears no echo, nor what anyone says until its speech (and its echo) ended.

    ``replies``: the stack's replies by the stretch they answer (its audio and ``target``), shared between runs on
    the same clip: a stretch heard alike in both (the clip itself, before anything of the stack's played) is decoded,
    translated and synthesized once, and its measured compute time is reused."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    vad = VadOptions()
    pad = vad.speech_pad_ms * SAMPLE_RATE // 1000
    quiet = vad.min_silence_duration_ms * SAMPLE_RATE // 1000
    mic = np.zeros(lead + len(clip) + int(window_s * SAMPLE_RATE), np.float32)
    mic[lead: lead + len(clip)] = clip
    last_speech = lead + end
    gain = 0.0 if echo is None else 10 ** (echo.gain_db / 20)
    delay = 0 if echo is None else echo.delay_ms * SAMPLE_RATE // 1000
    turns: list[PeerEchoTurn] = []
    pos = busy = playing = 0  # where the next stretch may start; when the stack is free; when its speech ends
    while len(turns) < max_turns:
        found = get_speech_timestamps(mic[pos:], vad)
        if not found:
            break
        start, stop = pos + found[0]["start"], pos + found[0]["end"]
        cut = stop - pad + quiet  # its last speech (the padded end, unpadded) + the silence the VAD waits for
        if cut > len(mic):  # not over within the window
            break
        stretch = mic[start:stop].copy()
        key = (target, hashlib.sha256(stretch.tobytes()).digest())
        reply = replies.get(key) if replies is not None else None
        if reply is None:
            reply = peer.reply(stretch, target)
            if replies is not None:
                replies[key] = reply
        busy = max(cut, busy) + int(reply.compute_ms * SAMPLE_RATE / 1000)
        played: int | None = max(busy, playing)
        lead = 0
        if len(reply.audio) and played < len(mic):
            playing = played + len(reply.audio)
            at = played + delay
            n = max(0, min(len(reply.audio), len(mic) - at))
            if listens_while_speaking:
                mic[at: at + n] += np.float32(gain) * reply.audio[:n]
            else:  # muted from its first sample to its echo's last
                mic[played: at + n] = 0.0
            lead = first_sound(reply.audio)
        else:
            played = None
        turns.append(PeerEchoTurn(start, stop, cut, None if played is None else played + lead, reply.lang,
                                  reply.heard, reply.said, own_voice=start + pad > last_speech + VAD_FRAME,
                                  lead=lead))
        pos = stop
    return turns


def own_voice_turns(turns: list[PeerEchoTurn]) -> list[PeerEchoTurn]:
    """The turns in which the stack translated its own voice (a stretch of it that it said something back to)."""
    from edge_rt.stages.asr.tokenizer import has_words

    return [t for t in turns if t.own_voice and has_words(t.said)]


def peer_turn_ms(turns: list[PeerEchoTurn], lead: int, end: int) -> float | None:
    """Its turn latency on the clip, as the bench measures the loop's: from the clip's last speech (``end``, clip
    samples after ``lead``) to the first sound of the reply to the stretch that holds it (None: it said nothing)."""
    holding = [t for t in turns if t.start <= lead + end + VAD_FRAME]
    if not holding or holding[-1].played is None:
        return None
    return (holding[-1].played - (lead + end)) * 1000 / SAMPLE_RATE
