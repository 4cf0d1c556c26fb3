"""Progress events of the build library, and no human output from it (issue 13)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import edge_rt.build.calibration as calibration_pkg
from edge_rt.build.calibration.progress import EVENT_ATTR, LOGGER, ProgressEvent, ProgressTask


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.events: list[ProgressEvent] = []

    def emit(self, record):
        self.events.append(getattr(record, EVENT_ATTR))


def test_a_task_reports_start_advance_relabel_and_finish():
    h = _Collect()
    LOGGER.addHandler(h)
    LOGGER.setLevel(logging.DEBUG)
    try:
        with ProgressTask("asr/encoder: entropy calibration", 3) as task:
            task.advance()
            task.advance(2)
            task.update(label="asr/encoder: entropy thresholds")
    finally:
        LOGGER.removeHandler(h)
        LOGGER.setLevel(logging.NOTSET)
    assert [(e.done, e.total, e.finished) for e in h.events] == [(0, 3, False), (1, 3, False), (3, 3, False),
                                                                 (3, 3, False), (3, 3, True)]
    assert len({e.task for e in h.events}) == 1 and h.events[-1].label.endswith("thresholds")


def test_silent_without_a_handler(caplog):
    with caplog.at_level(logging.WARNING):
        with ProgressTask("nothing listens", 2) as task:
            task.advance()
    assert not caplog.records


def test_the_calibration_package_prints_nothing_and_draws_no_bars():
    offenders = []
    for path in sorted(Path(calibration_pkg.__file__).parent.glob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bprint\(|\brich\b|Console\(|tqdm", line.split("#")[0]):
                offenders.append(f"{path.name}:{i}: {line.strip()}")
    assert offenders == []
