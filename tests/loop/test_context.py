"""Context across utterances: which language and text the previous utterance lends (pure, sample indices)."""

from __future__ import annotations

import pytest

from edge_rt.loop.context import NONE, Context, ContextOptions, KeepLanguage, Known
from edge_rt.stages.asr.whisper import Prompt
from edge_rt.units import SAMPLE_RATE


def test_keep_language_switches_only_on_strong_evidence():
    keep = KeepLanguage("en", 0.85)
    assert keep("zh", 0.52) == "en"  # "However" heard as Chinese
    assert keep("la", 0.84) == "en"
    assert keep("de", 0.9) == "de"
    assert keep("en", 0.1) == "en"


def test_context_lasts_within_the_window_and_names_the_language():
    ctx = Context(ContextOptions(within_s=5.0, switch_prob=0.85, prompt=True))
    assert ctx.at(0) is NONE
    ctx.remember(10 * SAMPLE_RATE, "en", " Basic alkaline. ")
    near = ctx.at(12 * SAMPLE_RATE)
    assert near.language == KeepLanguage("en", 0.85) and near.prompt == Prompt("Basic alkaline.", "en")
    assert near.transcribe_kwargs(None) == {"language": near.language, "prompt": near.prompt}
    assert near.transcribe_kwargs("de")["language"] == "de"  # a language given by the user wins
    assert ctx.at(16 * SAMPLE_RATE) is NONE  # 6 s later: a new conversation
    ctx.forget()
    assert ctx.at(12 * SAMPLE_RATE) is NONE


def test_an_utterance_is_never_its_own_context():
    """The source caption of a translate route is decoded after its utterance was remembered."""
    ctx = Context(ContextOptions(prompt=True))
    ctx.remember(5 * SAMPLE_RATE, "en", "first")
    ctx.remember(9 * SAMPLE_RATE, "de", "")  # the translation is out, the German caption pending
    assert ctx.at(6 * SAMPLE_RATE).prompt == Prompt("first", "en")  # the utterance that started at 6 s
    ctx.remember(9 * SAMPLE_RATE, "de", "zweite")  # its caption replaces the entry
    assert ctx.at(10 * SAMPLE_RATE).prompt == Prompt("zweite", "de")
    assert ctx.at(6 * SAMPLE_RATE).prompt == Prompt("first", "en")


def test_defaults_and_switches():
    ctx = Context()  # the defaults: language carry-over, no prompt (see ContextOptions)
    ctx.remember(SAMPLE_RATE, "en", "text")
    assert ctx.at(2 * SAMPLE_RATE).prompt is None and ctx.at(2 * SAMPLE_RATE).language is not None
    off = Context(ContextOptions(switch_prob=None))
    off.remember(SAMPLE_RATE, "en", "text")
    assert off.at(2 * SAMPLE_RATE).transcribe_kwargs(None) == {"language": None}
    with pytest.raises(ValueError, match="switch_prob"):
        ContextOptions(switch_prob=1.5)
    with pytest.raises(ValueError, match="within_s"):
        ContextOptions(within_s=-1)


def test_a_follow_up_is_decoded_with_the_previous_utterance_when_its_start_is_known():
    """ContextOptions.joint: the previous utterance's start, text and language, for joint decoding."""
    ctx = Context()
    ctx.remember(3 * SAMPLE_RATE, "en", " However ", start_sample=2 * SAMPLE_RATE)
    assert ctx.at(4 * SAMPLE_RATE).joint == Known(2 * SAMPLE_RATE, "However", "en")
    assert ctx.at(9 * SAMPLE_RATE).joint is None  # too late: a new conversation
    ctx.remember(5 * SAMPLE_RATE, "de", "", start_sample=4 * SAMPLE_RATE)  # a caption still pending
    assert ctx.at(6 * SAMPLE_RATE).joint is None and ctx.at(6 * SAMPLE_RATE).follows
    off = Context(ContextOptions(joint=False))
    off.remember(3 * SAMPLE_RATE, "en", "However", start_sample=2 * SAMPLE_RATE)
    assert off.at(4 * SAMPLE_RATE).joint is None
    unknown = Context()
    unknown.remember(3 * SAMPLE_RATE, "en", "However")  # no start sample: nothing to decode it with
    assert unknown.at(4 * SAMPLE_RATE).joint is None
    for bad in ({"joint_max_cost": -0.1}, {"joint_max_s": 31}, {"joint_max_s": 0}, {"joint_min_words_per_s": -1},
                {"joint_min_s": -0.1}, {"joint_min_s": 28.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ContextOptions(**bad)


def test_an_utterance_the_gate_dropped_is_lent_to_one_that_starts_at_once():
    """ContextOptions.lend_within_s: the start of the last utterance the unsure gate dropped, for an utterance that
    starts at most that long after its end, when no final utterance came in between."""
    ctx = Context(ContextOptions(lend_within_s=2.0))
    ctx.dropped(2 * SAMPLE_RATE, 4 * SAMPLE_RATE)
    near = ctx.at(5 * SAMPLE_RATE)
    assert near.lent == 2 * SAMPLE_RATE and not near.follows and near.joint is None  # the gate still applies
    assert ctx.at(int(6.5 * SAMPLE_RATE)).lent is None  # 2.5 s later: not the same sentence
    assert ctx.at(3 * SAMPLE_RATE).lent is None  # starts inside it: a later utterance's context, never its own
    ctx.remember(6 * SAMPLE_RATE, "en", "Ask not", start_sample=5 * SAMPLE_RATE)
    after = ctx.at(7 * SAMPLE_RATE)  # a final utterance since: it is the context (joint decoding), nothing lent
    assert after.lent is None and after.joint == Known(5 * SAMPLE_RATE, "Ask not", "en")
    ctx.forget()
    ctx.dropped(2 * SAMPLE_RATE, 4 * SAMPLE_RATE)
    ctx.forget()
    assert ctx.at(5 * SAMPLE_RATE) is NONE
    off = Context(ContextOptions(lend_within_s=None))
    off.dropped(2 * SAMPLE_RATE, 4 * SAMPLE_RATE)
    assert off.at(5 * SAMPLE_RATE) is NONE
    for bad in (0.0, 6.0):
        with pytest.raises(ValueError, match="lend_within_s"):
            ContextOptions(lend_within_s=bad)
