"""Property-based fuzzing (hypothesis) of the pure parts that take untrusted input.

* ring buffer: random write/read sizes keep order, indices and loss accounting;
* endpointer: random probability sequences give alternating, ordered, bounded events;
* config: random TOML-ish input raises only ConfigError, never anything else;
* audio reader: random bytes and mutated real WAV headers give AudioInputError or valid audio.
"""

from __future__ import annotations

import string
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_rt.audio.files import read_audio
from edge_rt.audio.ring import Ring
from edge_rt.config import Config, ConfigError, load_config
from edge_rt.errors import AudioInputError
from edge_rt.loop.endpoint import Endpointer, EndpointOptions
from edge_rt.units import VAD_FRAME

FUZZ = settings(max_examples=150, deadline=None, database=None,  # no .hypothesis/ folder in the checkout
                suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- ring ----------------------------------------------------------------------------
ops = st.lists(st.tuples(st.sampled_from(["w", "r"]), st.integers(0, 300), st.booleans()), max_size=80)


@FUZZ
@given(capacity_log2=st.integers(1, 8), policy=st.sampled_from(["overwrite", "reject"]), ops=ops)
def test_ring_keeps_order_indices_and_counts_every_loss(capacity_log2, policy, ops):
    ring = Ring(1 << capacity_log2, policy=policy, dtype=np.float64)
    produced = 0  # the clock: index of the next sample
    consumed = 0  # one past the last index handed out (or skipped as lost)
    delivered = 0
    for op, n, silence in ops:
        if op == "w":
            # sample value = its index, so order and position are checkable after any wrap or loss
            accepted = ring.write(np.arange(produced, produced + n, dtype=np.float64))
            if policy == "reject":
                assert accepted == min(n, ring.capacity - (produced - consumed))
                produced += accepted
            else:
                assert accepted == n
                produced += n
            assert ring.written == produced
            continue
        out = np.full(n, -1.0)
        underruns, dropped = ring.stats.underruns, ring.stats.dropped
        first, count = ring.read_into(out, fill_silence=silence)
        assert first >= consumed and first + count <= produced
        assert np.array_equal(out[:count], np.arange(first, first + count))  # in order, indices = clock
        assert ring.stats.dropped - dropped == first - consumed  # a skip is exactly the loss it counts
        if silence and count < n:
            assert not out[count:].any() and ring.stats.underruns == underruns + 1
        delivered += count
        consumed = first + count
        assert ring.read_index == consumed
        assert 0 <= ring.available() <= ring.capacity
    assert delivered + ring.stats.dropped == consumed  # every index before the reader was delivered or counted
    assert sum(c for _, c in ring.stats.gaps) == ring.stats.dropped
    if policy == "reject":
        assert ring.stats.dropped == 0 and ring.stats.overruns == 0


# -- endpointer ----------------------------------------------------------------------
probability_runs = st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 120)), min_size=1, max_size=30)
options = st.builds(
    EndpointOptions,
    hangover_ms=st.integers(32, 1000),
    preroll_ms=st.integers(0, 500),
    start_frames=st.integers(1, 5),
    max_utterance_s=st.floats(1.0, 10.0),
    split_search_s=st.floats(0.1, 0.9),
    base_threshold=st.floats(0.1, 0.6),
)


@FUZZ
@given(runs=probability_runs, noise=st.lists(st.floats(0.0, 1.0), max_size=200), o=options)
def test_endpointer_events_alternate_are_ordered_and_bounded(runs, noise, o):
    probs = [p for value, n in runs for p in [value] * n] + noise
    ep = Endpointer(o)
    events = []
    for i, p in enumerate(probs):
        for e in ep.push(i, p):
            assert e.sample <= (i + 1) * VAD_FRAME  # nothing from the future
            events.append(e)
    events += ep.flush(len(probs))
    assert not ep.in_speech
    kinds = [e.kind for e in events]
    assert kinds == ["start", "end"] * (len(events) // 2)  # alternate, start first, every start closed
    longest = o.max_frames * VAD_FRAME + o.preroll_samples
    last_end = 0
    for start, end in zip(events[::2], events[1::2]):
        assert end.reason in ("silence", "max_length", "flush")
        assert last_end <= start.sample < end.sample, (start, end)
        assert end.sample - start.sample <= longest
        last_end = end.sample


# -- config ----------------------------------------------------------------------------
SECTIONS = ["pack", "audio", "translate", "loop", "record", "metrics"]
KEYS = ["name", "precision", "threads", "backend", "device_in", "device_out", "rate_in", "rate_out", "stall_s",
        "to", "from", "hangover_ms", "latency_budget_ms", "dir", "audio", "flight_s", "max_dumps", "port", "bind"]
scalars = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.booleans(), st.text(max_size=40),
                    st.sampled_from(["/" + "a" * 5000, "/tmp/\x00x", "/proc/1/x", "", "auto", "::1", "0.0.0.0"]),
                    st.datetimes())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                          max_size=3), max_leaves=6)
keys = st.sampled_from(KEYS) | st.sampled_from(KEYS) | st.text(max_size=8)  # mostly real keys
tables = st.dictionaries(keys, values, max_size=6)
documents = st.dictionaries(st.sampled_from(SECTIONS) | st.text(max_size=8), tables | tables | values, max_size=6)
# Path-valued keys touch the file system: long names, NUL, odd characters.
components = (st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=30)
              | st.integers(200, 5000).map(lambda n: "x" * n) | st.sampled_from(["..", ".", "\x00", "é" * 130]))
paths = st.builds(lambda root, parts: root + "/".join(parts),
                  st.sampled_from(["", "/", "/tmp/", "/proc/self/", "/dev/null/", "/root/"]),
                  st.lists(components, min_size=1, max_size=20))


@FUZZ
@given(doc=documents)
def test_config_from_any_table_is_valid_or_a_named_config_error(doc):
    try:
        c = Config.from_dict(doc)
    except ConfigError as e:
        assert "invalid config" in str(e)
        return
    assert isinstance(c, Config)


@FUZZ
@given(section_key=st.sampled_from([("record", "dir"), ("pack", "name"), ("audio", "device_in")]), path=paths)
def test_config_paths_are_valid_or_a_named_config_error(section_key, path):
    section, key = section_key
    try:
        Config.from_dict({section: {key: path}})
    except ConfigError as e:
        assert f"{section}.{key}" in str(e)


toml_chars = st.text(alphabet=string.printable + "éü中\x00\ufeff", max_size=300)


@FUZZ
@given(text=toml_chars, tail=st.binary(max_size=20))
def test_config_file_with_any_content_is_valid_or_a_named_config_error(tmp_path_factory, text, tail):
    path = tmp_path_factory.mktemp("cfg") / "config.toml"
    example = (Path(__file__).resolve().parents[1] / "systemd" / "config.example.toml").read_text()
    cut = len(text) % (len(example) + 1)
    path.write_bytes((example[:cut] + text).encode("utf-8", "surrogatepass") + tail)
    try:
        load_config(path)
    except ConfigError as e:
        assert str(path) in str(e)


# -- audio reader ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_wav(speech_dir) -> bytes:
    return (speech_dir / "en_librispeech_1089-134691-0000.wav").read_bytes()[:8000]


def _read(path: Path) -> None:
    try:
        audio = read_audio(path)
    except AudioInputError as e:
        assert str(path) in str(e)
        return
    assert audio.dtype == np.float32 and audio.ndim == 1 and np.isfinite(audio).all()


@FUZZ
@given(data=st.binary(max_size=2000))
def test_random_bytes_are_audio_or_a_named_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "x.wav"
    path.write_bytes(data)
    _read(path)


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 63), st.integers(0, 255)), min_size=1, max_size=8),
       fields=st.lists(st.tuples(st.sampled_from([4, 16, 22, 24, 28, 32, 34, 40]),
                                 st.sampled_from([0, 1, 2, 3, 7, 8, 255, 65535, 2**31 - 1, 2**32 - 1])), max_size=3),
       cut=st.integers(0, 8000))
def test_mutated_wav_headers_are_audio_or_a_named_error(tmp_path_factory, real_wav, edits, fields, cut):
    data = bytearray(real_wav)
    for at, byte in edits:
        data[at] = byte
    for at, value in fields:  # sizes, channel counts, rates, bit depths set to edge values
        width = 2 if at in (22, 32, 34) else 4
        data[at : at + width] = struct.pack("<H" if width == 2 else "<I", value % (1 << (8 * width)))
    path = tmp_path_factory.mktemp("wav") / "x.wav"
    path.write_bytes(bytes(data[: max(cut, 1)]))
    _read(path)
