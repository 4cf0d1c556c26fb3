"""Where known text ends at the start of a joint transcript, and what follows it (pure text)."""

from __future__ import annotations

from edge_rt.loop.continuation import Continuation, continuation


def test_the_rest_of_the_sentence_after_the_known_fragment():
    assert continuation("However", "However, due to the slow communication channels.", "en") == \
        Continuation("due to the slow communication channels.", 0.0)
    # punctuation Whisper puts between the two parts is not part of the continuation
    assert continuation("And so my fellow America", "And so my fellow America... ...ask not!", "en") == \
        Continuation("ask not!", 0.0)


def test_the_known_text_may_read_differently_in_the_joint_transcript():
    """Case, punctuation and a changed word: the best matching beginning is cut, the edits counted."""
    c = continuation("Ask not what your country", "ask not, what our country can do for you", "en")
    assert c == Continuation("can do for you", 0.2)  # one word of five differs
    c = continuation("The cabbage juice", "The cap is used to change color", "en")
    assert c.cost > 0.5  # a beginning this different is the caller's cue to decode on its own


def test_nothing_after_the_known_text():
    assert continuation("ask not what your", "Ask not what your.", "en") == Continuation("", 0.0)
    assert continuation("ask not", "", "en") == Continuation("", 1.0)


def test_no_answer_without_words_to_align():
    assert continuation("你好", "你好世界", "zh") is None  # written without spaces: no word split here
    assert continuation(" ... ", "Hello there", "en") is None
