from edge_rt.stages.mt.text import join_sentences, split_sentences


def test_splits_on_sentence_punctuation_and_keeps_lines():
    text = "Hello there! How are you? I said \"fine.\" Bye\n\nSecond line."
    lines = list(split_sentences(text))
    assert lines == [["Hello there!", "How are you?", "I said \"fine.\"", "Bye"], ["Second line."]]
    assert join_sentences(lines) == "Hello there! How are you? I said \"fine.\" Bye\nSecond line."


def test_does_not_split_abbreviations_initials_or_lower_case():
    text = "Dr. Smith met J. Doe at 6 p.m. on Monday. Then they left."
    assert list(split_sentences(text)) == [["Dr. Smith met J. Doe at 6 p.m. on Monday.", "Then they left."]]


def test_blank_text_has_no_sentences():
    assert list(split_sentences("  \n\n ")) == []
