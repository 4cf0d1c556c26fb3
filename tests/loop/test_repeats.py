"""repeats.said_once: a run of words Whisper wrote twice in a row, said once."""

from __future__ import annotations

import pytest

from edge_rt.loop.options import LoopOptions
from edge_rt.loop.repeats import said_once


@pytest.mark.parametrize("text, once", [
    # generated sentences with a 0.8-s hesitation (tools/tune_redecode.py --hesitate 0.8, seed 53)
    ("It takes about 40 minutes. It takes about 40 minutes. It's like rock.", "It takes about 40 minutes. It's like rock."),
    ("Do you have this shirt? Do you have this shirt? and a larger size.", "Do you have this shirt? and a larger size."),
    ("They're 12 months. It's in a year. It's in a year.", "They're 12 months. It's in a year."),
    ("a b c a b c a b c d", "a b c d"),  # three times: once
])
def test_a_run_written_twice_is_said_once(text, once):
    assert said_once(text, "en", 3) == once


@pytest.mark.parametrize("text", [
    "He could wait, wait no longer.",  # one word twice: a speaker does that
    "Friendly Friendly",
    "Ask not what your country can do for you, ask what you can do for your country.",  # said again later
    "very very very good",
    "",
])
def test_what_a_speaker_says_is_left_as_written(text):
    assert said_once(text, "en", 3) == text


def test_words_match_as_the_scorer_reads_them_and_the_first_copy_is_kept():
    assert said_once("Do you have this shirt? do you have this shirt, in blue", "en", 3) == \
        "Do you have this shirt? in blue"
    assert said_once("It is late. It is late.", "en", 4) == "It is late. It is late."  # 3 words < block 4
    assert said_once("我们的 国家 我们的 国家 我们的 国家", "zh", 1) == "我们的 国家 我们的 国家 我们的 国家"  # no spaces
    assert said_once("It is late. It is late. It is late.", "en", None) == "It is late. It is late. It is late."  # off


def test_the_option():
    assert LoopOptions(target="pt").repeat_words == 3
    assert LoopOptions(target="pt", repeat_words=None).repeat_words is None
    with pytest.raises(ValueError, match="repeat_words"):
        LoopOptions(target="pt", repeat_words=0)
