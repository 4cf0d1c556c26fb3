"""Field testing: record a live session, replay it, report it; the flight recorder; crash-safe audio files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.ops.replay import compare, word_errors
from edge_rt.ops.session_report import render_report
from edge_rt.ops.session import Session, SessionError
from edge_rt.audio.wav_stream import StreamingWav, read_wav
from tests.jack import RATE, run_live


# -- crash-safe WAV ---------------------------------------------------------------
def test_streaming_wav_round_trips_pcm16_exactly(tmp_path):
    x = (np.arange(-32768, 32768, 7, dtype=np.int32) / 32768.0).astype(np.float32)
    w = StreamingWav(tmp_path / "a.wav", 16000)
    w.append(x[:1000])
    w.pad_to(1500)
    w.append(x[1000:])
    w.close()
    y, rate = read_wav(tmp_path / "a.wav")
    assert rate == 16000 and len(y) == len(x) + 500
    assert np.array_equal(y[:1000], x[:1000]) and not y[1000:1500].any() and np.array_equal(y[1500:], x[1000:])
    import soundfile as sf

    assert sf.info(str(tmp_path / "a.wav")).frames == len(y)  # a normal WAV for every other tool


def test_a_wav_cut_by_a_crash_reads_to_its_last_sample(tmp_path):
    w = StreamingWav(tmp_path / "a.wav", 16000)
    w.append(np.full(1000, 0.5, np.float32))
    w.flush()
    w.append(np.full(500, 0.25, np.float32))  # not flushed: the header still says 1000
    w._f.flush()  # the bytes reached the file, then the power went
    y, _ = read_wav(tmp_path / "a.wav")
    assert len(y) == 1500 and y[-1] == 0.25


# -- comparison --------------------------------------------------------------------
def test_compare_pairs_utterances_by_overlap():
    rec = [{"utterance": 1, "start_sample": 0, "end_sample": 16000, "text": "Hello there.", "translation": "Olá.",
            "turn_latency_ms": 900.0},
           {"utterance": 2, "start_sample": 32000, "end_sample": 48000, "text": "Bye", "translation": "Tchau",
            "turn_latency_ms": 800.0}]
    rep = [dict(rec[0], utterance=1, text="hello there", start_sample=160), dict(rec[1], utterance=2, text="By")]
    c = compare(rec, rep)
    assert [r["same_text"] for r in c.rows] == [True, False] and not c.same_transcripts
    assert c.rows[1]["word_errors"] == 1 and word_errors("a b c", "a c") == 1
    assert compare(rec, [dict(t) for t in rec]).same_transcripts


def test_not_a_session(tmp_path):
    with pytest.raises(SessionError, match="not a recorded session"):
        Session.load(tmp_path)


# -- recorder + flight recorder on the real loop (fast file mode) -------------------
def test_recorder_and_flight_recorder(default_pack, speech_dir, tmp_path):
    from edge_rt.audio.sinks import TimelineSink
    from edge_rt.audio.sources import FastFileSource
    from edge_rt.ops.flight import FlightOptions
    from edge_rt.loop.loop import Loop, LoopOptions
    from edge_rt.pipeline import load_stages
    from edge_rt.ops.session import Recording, live_header

    audio = read_audio(speech_dir / "en_jfk.wav")
    source = FastFileSource(audio)
    sink = TimelineSink(22050, lambda: source.ring.read_index / 16000)
    options = LoopOptions(target="pt", source="en", partials=False)
    rec = Recording(tmp_path / "s", live_header("default", "fp32", 2, options, source, sink, 1.0), sink,
                    flight=FlightOptions(latency_budget_ms=1.0, seconds=5))  # 1 ms: every utterance is late
    loop = Loop(load_stages(default_pack), source, rec.sink, options, observers=rec.observers)
    traces = loop.run()
    rec.flight.on_error(RuntimeError("asr exploded"), traces[0])  # as the loop reports a stage failure
    rec.close()
    s = Session.load(tmp_path / "s")
    assert [t["text"] for t in s.traces] == [t.text for t in traces] and "country" in " ".join(t.text for t in traces)
    assert s.header["options"]["to"] == "pt" and s.header["ended_at"] and s.header["utterances"] == len(traces)
    got = s.input_audio()
    assert np.array_equal(got[: len(audio)], np.clip(np.round(audio * 32768), -32768, 32767) / 32768)
    out, rate = s.output_audio()
    assert rate == 22050 and np.sqrt(np.mean(out**2)) > 0.01
    dumps = s.flight_dumps()
    reasons = [json.loads(p.read_text())["reason"] for p in dumps]
    assert "late" in reasons and reasons[-1] == "error"
    err = json.loads(dumps[-1].read_text())
    assert "asr exploded" in err["error"] and any(e["kind"] == "utterance" for e in err["events"])
    dump_audio, dump_rate = read_wav(dumps[0].parent / "audio.wav")
    assert dump_rate == 16000 and 0 < len(dump_audio) <= 5 * 16000
    _check_report(tmp_path / "s", traces[0].text)


def _check_report(folder, text: str) -> None:
    import html

    page = render_report(folder)
    assert html.escape(text) in page
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) == 3
    for svg in svgs:
        ET.fromstring(svg)  # well-formed


# -- live: record through JACK, replay, report ----------------------------------------


@pytest.fixture(scope="module")
def recorded(jack, default_pack, speech_dir, tmp_path_factory):
    """`edge-rt run --record DIR` hears en_jfk through the JACK dummy server."""
    folder = tmp_path_factory.mktemp("field") / "session"
    # 4 s after the clip: the last utterance's hangover, decode, translate, first sound
    run_live(read_audio(speech_dir / "en_jfk.wav"), ["--to", "pt", "--from", "en", "--record", str(folder)], 4.0)
    return folder


def test_live_session_is_recorded(recorded):
    s = Session.load(recorded)
    assert s.header["devices"]["in"]["rate"] == RATE and s.header["ended_at"]
    spoken = [t for t in s.traces if t["translation"]]
    assert spoken and "country" in " ".join(t["text"] for t in spoken).lower()
    assert all(t["turn_latency_ms"] is not None for t in spoken)
    audio = s.input_audio()
    assert len(audio) > 11 * RATE and np.sqrt(np.mean(audio**2)) > 0.01
    out, rate = s.output_audio()
    assert rate == RATE and np.sqrt(np.mean(out**2)) > 0.005


def test_replay_gives_the_same_transcripts(recorded):
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "replay", str(recorded), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    print(json.dumps({k: result[k] for k in ("same_transcripts", "latency_ms")}))
    assert result["same_transcripts"], result["utterances"]
    assert result["replayed_utterances"] == result["recorded_utterances"] > 0


def test_report_renders(recorded):
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "report", str(recorded)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (recorded / "report.html").is_file()
    for t in Session.load(recorded).traces:
        _check_report(recorded, t["text"])
