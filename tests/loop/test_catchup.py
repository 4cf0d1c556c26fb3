import pytest

from edge_rt.loop.catchup import CatchUpOptions, speaking_rate


def test_no_backlog_is_the_voice_pace():
    o = CatchUpOptions()
    assert speaking_rate(0.0, o) == 1.0
    assert speaking_rate(o.start_backlog_s, o) == 1.0
    assert speaking_rate(5.0, None) == 1.0


def test_rate_rises_with_the_backlog_to_the_ceiling():
    o = CatchUpOptions(max_rate=1.25, start_backlog_s=0.5, full_backlog_s=3.0)
    mid = speaking_rate(1.75, o)
    assert 1.0 < mid < 1.25 and mid == pytest.approx(1.125)
    assert speaking_rate(3.0, o) == 1.25
    assert speaking_rate(60.0, o) == 1.25


@pytest.mark.parametrize("kwargs", [dict(max_rate=1.5), dict(max_rate=0.9),
                                    dict(start_backlog_s=3.0, full_backlog_s=2.0)])
def test_options_are_checked(kwargs):
    with pytest.raises(ValueError):
        CatchUpOptions(**kwargs)
