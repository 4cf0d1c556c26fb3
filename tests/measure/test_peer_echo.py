"""The package stack beside a loudspeaker (measure/peer_echo.py, `bench --loudspeaker --peer`): real
faster-whisper, Marian and Piper on the default pack's weights, a real clip; and the loop's own-voice count."""

from __future__ import annotations

import pytest

from edge_rt.audio.echo_path import EchoPath
from edge_rt.audio.files import read_audio
from edge_rt.loop.trace import UtteranceTrace
from edge_rt.measure.bench import LOUDSPEAKER_LEAD, LiveRun, oracle_end
from edge_rt.measure.peer_echo import own_voice_turns, peer_echo_run, peer_turn_ms
from edge_rt.measure.turn_taking import CaptionLog
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.units import SAMPLE_RATE, VAD_FRAME


@pytest.mark.slow
def test_the_package_stack_beside_a_loudspeaker_translates_its_own_voice(default_pack, speech_dir):
    """fr_fleurs_ski (3 s of French into English): the stack answers after its VAD's 2 s of silence; beside a
    loudspeaker (6 dB down, 40 ms late) it hears that answer and answers it again, with a headset it does not."""
    pytest.importorskip("faster_whisper", reason="bench --peer needs the dev extra (faster-whisper)")
    pytest.importorskip("piper", reason="bench --peer needs the dev extra (piper-tts)")
    from edge_rt.measure.peer import PeerStack

    stages = load_stages(default_pack, StageOptions(precision="int8"))
    peer = PeerStack.load(default_pack, stages)
    clip = read_audio(speech_dir / "fr_fleurs_ski.wav")
    end = oracle_end(stages.vad, clip)
    headset = peer_echo_run(peer, clip, end, "en", None, LOUDSPEAKER_LEAD, 12.0)
    assert len(headset) == 1 and not headset[0].own_voice and own_voice_turns(headset) == []
    first = headset[0]
    assert first.lang == "fr" and "similar" in first.said.lower(), first  # "... in a similar way."
    # its reply sounds after the 2 s of silence its VAD needs (from its own VAD's last speech, which ends ~0.1 s
    # before the bench's oracle end on this clip), plus its compute
    assert first.cut > LOUDSPEAKER_LEAD + end + 1.5 * SAMPLE_RATE and first.played - first.lead > first.cut
    assert peer_turn_ms(headset, LOUDSPEAKER_LEAD, end) == (first.played - LOUDSPEAKER_LEAD - end) * 1000 / SAMPLE_RATE
    # timed to its first sound, as the loop is: piper-tts's reply plays its lead of near-silence first
    assert 0 < first.lead < 0.25 * SAMPLE_RATE, first
    turn = peer.turn(clip, end, "fr", "en")  # bench --peer's headset turn
    assert 0 < turn.lead_ms < 250 and turn.latency_ms == pytest.approx(turn.wait_ms + turn.compute_ms + turn.lead_ms)
    replies: dict = {}
    loud = peer_echo_run(peer, clip, end, "en", EchoPath(), LOUDSPEAKER_LEAD, 12.0, replies=replies)
    assert loud[0].said == first.said  # the clip itself is answered as with a headset (nothing played before it)
    mine = own_voice_turns(loud)
    assert mine, [t.as_dict() for t in loud]
    # the stretch it answered began where its own reply came back: after the clip, at its reply's first sound
    assert mine[0].start + 400 * SAMPLE_RATE // 1000 >= loud[0].played
    # muting its microphone while it speaks (half duplex), it answers the clip and hears nothing of itself
    answered = len(replies)
    assert answered == len(loud)  # every stretch it heard was a different one
    half = peer_echo_run(peer, clip, end, "en", EchoPath(), LOUDSPEAKER_LEAD, 12.0, listens_while_speaking=False,
                         replies=replies)
    assert [t.said for t in half] == [first.said] and own_voice_turns(half) == []
    assert len(replies) == answered  # the clip, heard alike in both runs, was not decoded again


def test_the_loop_s_own_voice_is_what_it_translated_after_the_clip_s_last_speech():
    def trace(n: int, start: int, translation: str) -> UtteranceTrace:
        return UtteranceTrace(utterance=n, start_sample=start, end_sample=start + 8000, translation=translation)

    lead, end = 1000, 48_000
    run = LiveRun([trace(0, lead + 100, "Olá."), trace(1, lead + end + 2 * VAD_FRAME, "Olá outra vez."),
                   trace(2, lead + end + 9 * VAD_FRAME, ""), trace(3, lead + end + VAD_FRAME, "Ainda a frase.")],
                  clock=None, captions=CaptionLog(), last_played_ns=None, lead=lead)
    # the clip's utterance, and one that began within a frame of its end (the clip's last word), are the speaker's;
    # a dropped one (no translation: the echo gate, no speech) said nothing
    assert [t.utterance for t in run.own_voice(end)] == [1]
