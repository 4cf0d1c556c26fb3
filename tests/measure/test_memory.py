"""The loop's own RSS and cold start, measured in a fresh process (edge_rt/measure/memory.py)."""

from __future__ import annotations

import time

import pytest

from edge_rt.measure.memory import MemoryReport, measure_memory

CLIP = "en_librispeech_1089-134686-0001.wav"  # 3.3 s of English


@pytest.mark.slow
def test_measures_the_tiny_pack_in_its_own_process(tiny_pack, speech_dir):
    t0 = time.monotonic()
    r = measure_memory(tiny_pack.dir, [speech_dir / CLIP], precision="int8", threads=1, target="pt")
    wall = time.monotonic() - t0
    assert isinstance(r, MemoryReport) and r.pack == tiny_pack.name and r.clips == 1
    assert r.joint_window  # each pass ends with the joint decode's 30-s window, the largest encoder run
    # The weights must be resident after the load: at least the INT8 files the CPU engines read
    # (Marian's shared embedding counted once per pair, so half of the files is a safe floor).
    files = sum((tiny_pack.dir / (e.get("int8") or e["fp32"])).stat().st_size
                for stage in ("vad", "asr", "mt", "tts")
                for name, e in tiny_pack.stage(stage)["models"].items() if name != "decoder_device")
    assert r.rss_loaded_mb - r.rss_base_mb > 0.5 * files / 2**20
    # High-water marks are never below the resident set they were read with.
    assert r.load_peak_mb >= r.rss_loaded_mb
    assert r.peak_after_warmup_mb >= r.rss_warm_mb - 1
    assert r.rss_end_mb <= r.peak_after_warmup_mb + 1
    # The pipeline in this test process was never loaded: the figures are the child's, not ours.
    assert r.rss_base_mb < r.rss_loaded_mb
    # Cold start covers the child's imports and load, and fits inside the time this call took.
    assert r.import_s > 0 and r.load_s > 0 and r.warmup_s > 0
    assert r.import_s + r.load_s <= r.cold_start_s < wall


def test_no_clips_is_a_value_error(tiny_pack):
    with pytest.raises(ValueError, match="at least one clip"):
        measure_memory(tiny_pack.dir, [])


def test_a_failing_child_names_its_error(tmp_path, speech_dir):
    with pytest.raises(RuntimeError, match="is not built|manifest"):
        measure_memory(tmp_path / "no_pack", [speech_dir / CLIP])
