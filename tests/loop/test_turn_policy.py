"""The turn policy's rules over plain numbers and strings (no audio, no models)."""

from __future__ import annotations

import pytest

from edge_rt.loop.turn_policy import NOT_FINAL_WORDS, Decision, TurnOptions, TurnPolicy, model_frames, text_evidence


@pytest.mark.parametrize("text, lang, verdict", [
    ("He hoped there would be stew for dinner.", "en", "complete"),
    ("Where are you going?", "en", "complete"),
    ("He hoped there would be stew and.", "en", "incomplete"),  # Whisper's period after a fragment
    ("I went to the", "en", "incomplete"),
    ("because of the weather,", "en", "incomplete"),
    ("and then...", "en", "incomplete"),
    ("so I thought", "en", "unknown"),  # no mark, no telling word
    ("", "en", "none"),
    ("Eu fui para a escola e.", "pt", "incomplete"),
    ("Eu fui para a escola.", "pt", "complete"),
    ("Fui a la tienda con.", "es", "incomplete"),
    ("Je suis allé à la.", "fr", "incomplete"),
    ("Ich habe das Buch und.", "de", "incomplete"),
    ("Ich habe das Buch.", "de", "complete"),
    ("He said and.", "xx", "complete"),  # no word list for the language: only punctuation counts
])
def test_text_evidence(text, lang, verdict):
    assert text_evidence(text, lang).verdict == verdict


def test_word_lists_cover_the_languages_of_the_packs():
    assert {"en", "pt", "es", "fr", "de"} <= set(NOT_FINAL_WORDS)
    for words in ("and the to of because but a".split()):
        assert words in NOT_FINAL_WORDS["en"]
    assert "in" not in NOT_FINAL_WORDS["en"] and "so" not in NOT_FINAL_WORDS["en"]  # they end sentences too


def policy(**kw) -> TurnPolicy:
    return TurnPolicy(TurnOptions(**kw), hangover_ms=288)


def test_confident_model_and_a_final_sentence_end_at_once():
    p = policy(complete_after_ms=64, complete_probability=0.9)
    p.note_text("He could wait no longer.", "en")
    p.note_turn(0.93)
    assert p.decide() == Decision("complete", 64, p.decide().why)
    assert p.decide().end_reason == "complete"


def test_a_trailing_connective_holds_even_when_the_model_says_complete():
    p = policy(max_pause_ms=1280)
    p.note_text("For a full hour he had paced up and.", "en")
    p.note_turn(0.99)
    d = p.decide()
    assert (d.reason, d.end_at_ms, d.end_reason) == ("incomplete", 1280, "max_pause")
    assert "and" in d.why


def test_a_low_model_probability_holds_through_the_hesitation():
    p = policy(incomplete_probability=0.2)
    p.note_text("He hoped there would be stew.", "en")  # Whisper's period: not enough to end
    p.note_turn(0.05)
    assert p.decide().reason == "incomplete"


def test_an_unsure_model_falls_back_to_the_hangover():
    p = policy(incomplete_probability=0.2, complete_probability=0.5)
    p.note_text("He hoped there would be stew.", "en")
    p.note_turn(0.35)
    assert p.decide() == Decision("hangover", 288, p.decide().why)


def test_the_model_can_change_its_mind_as_the_pause_goes_on():
    p = policy(incomplete_probability=0.2, complete_probability=0.7)
    p.note_turn(0.1)
    assert p.decide().reason == "incomplete"
    p.note_turn(0.8)  # a longer trailing silence
    assert p.decide().reason == "complete"


def test_without_a_model_punctuation_alone_does_not_end_unless_asked():
    p = policy()  # text_alone_ends=False
    p.note_text("He could wait no longer.", "en")
    assert p.decide().reason == "hangover"
    q = policy(text_alone_ends=True, min_words=2)
    q.note_text("He could wait no longer.", "en")
    assert q.decide().reason == "complete"
    q.pause_started()
    q.note_text("Longer.", "en")  # one word is not trusted
    assert q.decide().reason == "hangover"


def test_without_any_evidence_the_hangover_decides():
    assert policy().decide().reason == "hangover"
    assert policy().decide().end_at_ms == 288


def test_a_new_pause_forgets_the_previous_evidence():
    p = policy()
    p.note_text("and the", "en")
    p.note_turn(0.9)
    p.speech_resumed(300)
    assert p.p_complete is None and p.decide().reason == "hangover"


def test_the_speakers_long_pauses_stretch_the_fallback_but_never_past_the_maximum():
    p = policy(pause_alpha=2.0, min_pauses=3, max_pause_ms=1280)
    for ms in (500, 600, 550):
        assert p.hangover == 288 or p.pauses_seen >= 3
        p.speech_resumed(ms)
    assert 550 < p.hangover <= 1280  # mean ~550 + 2 deviations
    for _ in range(50):
        p.speech_resumed(3000)
    assert p.hangover == 1280


def test_short_gaps_and_a_quick_speaker_keep_the_plain_hangover():
    p = policy(min_tracked_pause_ms=64, min_pauses=3)
    for _ in range(10):
        p.speech_resumed(32)  # VAD jitter: not a pause
    assert p.pauses_seen == 0 and p.hangover == 288
    for _ in range(10):
        p.speech_resumed(100)
    assert p.pauses_seen == 10 and p.hangover == 288  # never shorter than the endpointer's hangover


@pytest.mark.parametrize("kw", [dict(complete_probability=0.2, incomplete_probability=0.5),
                                dict(complete_after_ms=2000, max_pause_ms=1000), dict(model_at_ms=(192, 64)),
                                dict(model_at_ms=(0,)), dict(min_words=0), dict(pause_alpha=-1.0)])
def test_bad_options_are_named(kw):
    with pytest.raises(ValueError):
        TurnOptions(**kw)


def test_the_model_alone_may_be_required_to_agree_with_a_final_mark():
    p = policy(final_mark_required=True, complete_probability=0.9)
    p.note_turn(0.95)
    assert p.decide().reason == "complete"  # no transcript (speculation off): the model decides
    p.note_text("so I thought", "en")  # a transcript without a final mark
    assert p.decide().reason == "hangover"
    p.note_text("so I thought so.", "en")
    assert p.decide().reason == "complete"


def test_without_the_final_mark_rule_the_model_alone_ends_a_sentence_the_text_does_not_call_incomplete():
    p = policy(final_mark_required=False, complete_probability=0.9)
    p.note_text("so I thought", "en")
    p.note_turn(0.95)
    assert p.decide().reason == "complete"


def test_an_unmarked_transcript_holds_when_asked():
    p = policy(unmarked_holds=True, min_words=2)
    p.note_text("fellow wrestlers also pay tribute", "en")
    p.note_turn(0.99)
    assert p.decide().reason == "incomplete"
    q = policy(unmarked_holds=False)
    q.note_text("fellow wrestlers also pay tribute", "en")
    assert q.decide().reason == "hangover"


def test_whispers_end_mark_probability_ends_or_holds_when_asked():
    p = policy(mark_complete=0.9, mark_incomplete=0.5, max_pause_ms=1024, complete_after_ms=64)
    p.note_text("He could wait no longer.", "en", 0.97)
    d = p.decide()
    assert (d.reason, d.end_at_ms) == ("complete", 64) and "mark=0.97" in d.why
    p.note_text("Due to the slow communication.", "en", 0.31)  # a period Whisper was unsure of
    assert p.decide() == Decision("incomplete", 1024, p.decide().why)
    p.note_text("Due to the slow communication.", "en", 0.7)  # between the two: the other evidence decides
    assert p.decide().reason == "hangover"
    p.note_text("He could wait no longer.", "en", float("nan"))  # no verdict from the decoder
    assert p.decide().reason == "hangover"
    p.note_text("Longer.", "en", 0.99)  # one word is not trusted either way
    assert p.decide().reason == "hangover"
    p.note_text("He went to the.", "en", 0.99)  # a trailing "the" holds whatever the mark says
    assert p.decide().reason == "incomplete"


def test_the_end_mark_is_forgotten_at_a_new_pause_and_unused_by_default():
    p = policy(mark_complete=0.9)
    p.note_text("He could wait no longer.", "en", 0.97)
    p.pause_started()
    assert p.mark is None and p.decide().reason == "hangover"
    q = policy(mark_complete=None, mark_incomplete=None)
    q.note_text("He could wait no longer.", "en", 0.01)
    assert q.decide().reason == "hangover"


def test_a_translation_held_by_its_mark_asks_for_a_transcript_whose_sure_mark_ends_it():
    """German into English: Whisper marks the translation's end low (de_fleurs_test_001's real end: 0.28), its
    transcript's in German high (0.96): that one takes the translation's place."""
    p = policy(max_pause_ms=1024, complete_after_ms=256)  # the defaults' marks: 0.8 / 0.5, German, Spanish, French
    p.note_text("The T-Rex who didn't grow.", "en", 0.28)
    assert p.decide().reason == "incomplete" and p.wants_source_mark("de")
    assert not p.wants_source_mark("zh")  # Chinese transcripts seldom end in a mark: not asked for
    p.note_source_mark(0.96)
    d = p.decide()
    assert (d.reason, d.end_at_ms) == ("complete", 256) and "mark=0.96, in its own language" in d.why
    assert p.source_mark_used and not p.wants_source_mark("de")  # asked once per speculation
    p.pause_started()  # a new pause forgets it
    assert not p.source_mark_used and p.mark is None


def test_an_unsure_transcript_leaves_the_translation_s_hold_and_other_holds_never_ask():
    p = policy(max_pause_ms=1024)
    p.note_text("The use of blocks is required.", "en", 0.39)
    assert p.wants_source_mark("es")
    p.note_source_mark(0.07)  # es_fleurs_test_001's spliced hesitation: "el uso de cuadro de los blocks"
    assert p.decide().reason == "incomplete" and not p.source_mark_used and not p.wants_source_mark("es")
    p.note_source_mark(float("nan"))
    assert p.decide().reason == "incomplete"
    for text, mark in (("The use of blocks and", 0.3),  # a trailing "and" holds whatever the marks say
                       ("Blocks.", 0.3),  # one word: the mark is not read
                       ("The use of blocks is required.", 0.6),  # not held by the mark
                       ("The use of blocks is required.", float("nan"))):
        p.note_text(text, "en", mark)
        assert not p.wants_source_mark("es"), text
    q = policy(source_mark_langs=())
    q.note_text("The T-Rex who didn't grow.", "en", 0.28)
    assert not q.wants_source_mark("de")
    r = policy(mark_complete=None)
    r.note_text("The T-Rex who didn't grow.", "en", 0.28)
    assert not r.wants_source_mark("de")  # no mark would end the pause


@pytest.mark.parametrize("kw", [dict(source_mark_langs=("de", "")), dict(source_mark_langs=(None,)),
                                dict(source_mark_langs="de")])
def test_bad_source_mark_languages_are_named(kw):
    with pytest.raises(ValueError, match="source_mark_langs"):
        TurnOptions(**kw)


@pytest.mark.parametrize("kw", [dict(mark_complete=1.5), dict(mark_incomplete=-0.1),
                                dict(mark_complete=0.5, mark_incomplete=0.8)])
def test_bad_end_mark_options_are_named(kw):
    with pytest.raises(ValueError, match="mark_"):
        TurnOptions(**kw)


def test_an_empty_speculation_holds_the_pause_when_asked():
    p = policy(empty_holds=True, max_pause_ms=1024, complete_probability=0.9)
    p.note_turn(0.99)
    assert p.decide().reason == "complete"  # no speculation ran: the model decides
    p.note_text("", "en")  # the speculation ran and heard nothing
    assert p.decide() == Decision("incomplete", 1024, p.decide().why)
    q = policy(empty_holds=False, complete_probability=0.9)
    q.note_turn(0.99)
    q.note_text("", "en")
    assert q.decide().reason == "complete"


def test_the_model_runs_only_where_a_decision_that_can_end_the_pause_reads_its_answer():
    """model_frames: no pause ends before complete_after_ms (or the hangover), and the policy reads the latest
    answer, so a call followed by another one by then is never read where it matters."""
    assert model_frames(TurnOptions(), 288) == {6, 12, 24}  # 64 ms goes: the call at 192 ms answers before 256 ms
    assert TurnPolicy(TurnOptions(), 288).model_frames == {6, 12, 24}
    assert model_frames(TurnOptions(complete_after_ms=64), 288) == {2, 6, 12, 24}  # a GPU's early end reads it
    assert model_frames(TurnOptions(), 64) == {2, 6, 12, 24}  # a hangover shorter than complete_after_ms too
    assert model_frames(TurnOptions(model_at_ms=(64,)), 288) == {2}  # the last call always stays
    assert model_frames(TurnOptions(model_at_ms=(64, 128, 192, 384), complete_after_ms=320), 288) == {6, 12}
    assert model_frames(TurnOptions(), 288, every=True) == {2, 6, 12, 24}  # every call (tools/tune_turn.py's recording)


@pytest.mark.parametrize("text, mark, p, settled", [
    ("I went to the", float("nan"), 0.99, True),  # a trailing word that cannot end a sentence
    ("because of the weather,", float("nan"), None, True),  # a comma
    ("And so my fellow American.", 0.34, 0.97, True),  # Whisper's end mark under mark_incomplete (0.5)
    ("", float("nan"), 0.99, True),  # the speculation heard no words
    ("Yes.", 0.1, None, False),  # one word: its mark says nothing (min_words)
    ("He could wait no longer.", 0.7, 0.1, False),  # held only by the model's answer, which the next call can change
    ("He could wait no longer.", 0.9, 0.99, False),  # complete
])
def test_a_hold_is_settled_only_by_the_speculations_own_evidence(text, mark, p, settled):
    """TurnPolicy.settled_hold: the evidence that no later turn-model answer can overrule (the loop decodes such a
    held pause again with its tail, LoopOptions.held_postroll_ms); decide() holds it whatever the model says."""
    t = policy()
    t.pause_started()
    t.note_text(text, "en", mark)
    if p is not None:
        t.note_turn(p)
    assert t.settled_hold is settled
    if settled:
        for later in (0.0, 0.5, 0.99):
            t.note_turn(later)
            assert t.decide().reason == "incomplete" and t.settled_hold
    t.pause_started()
    assert not t.settled_hold  # a new pause: no speculation yet
