from edge_rt.loop.stream import LocalAgreement, common_prefix


def test_common_prefix_ignores_case_and_punctuation():
    assert common_prefix("And so, my".split(), "and so my fellow".split()) == 3
    assert common_prefix([], ["a"]) == 0


def test_words_commit_only_when_two_partials_agree():
    la = LocalAgreement()
    assert la.update("and so") == []
    assert la.update("and so my fellow") == ["and", "so"]
    assert la.update("and so my fellow americans") == ["my", "fellow"]
    assert la.stable_text == "and so my fellow"


def test_committed_words_are_never_retracted():
    la = LocalAgreement()
    la.update("ask not what")
    la.update("ask not what your")
    assert la.committed == ["ask", "not", "what"]
    assert la.update("ask knot") == []  # disagrees with a committed word
    assert la.update("ask knot") == []
    assert la.committed == ["ask", "not", "what"]
