"""A JACK dummy server and a harness that plays into and records from another JACK client.

The dummy driver is an exactly clocked sound card without hardware (see
../shared/docs/FACTS.md §4). `.ci/run` installs jackd2 and libportaudio2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest

RATE = 16000
PERIOD = 320


def _jack_running() -> bool:
    return subprocess.run(["jack_lsp"], capture_output=True).returncode == 0


def ensure_jack() -> subprocess.Popen | None:
    """Start `jackd -d dummy` unless one runs; returns the process we started (or None)."""
    if shutil.which("jackd") is None or shutil.which("jack_connect") is None:
        if os.environ.get("CI"):
            pytest.fail("jackd is not installed; .ci/run must install jackd2 (apt)")
        pytest.skip("jackd is not installed (apt install jackd2 libportaudio2): live-audio test skipped")
    if _jack_running():
        return None
    proc = subprocess.Popen(["jackd", "--no-realtime", "-d", "dummy", "-r", str(RATE), "-p", str(PERIOD)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if _jack_running():
            return proc
        time.sleep(0.1)
    proc.kill()
    pytest.fail("jackd did not start")


def port_names() -> list[str]:
    out = subprocess.run(["jack_lsp"], capture_output=True, text=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def connect(src: str, dst: str) -> None:
    subprocess.run(["jack_connect", src, dst], check=True, capture_output=True)


def _await_new_ports(before: set[str], timeout_s: float = 10.0) -> dict[str, str]:
    """The one new output and one new input port that appeared since ``before``."""
    deadline = time.monotonic() + timeout_s
    while True:
        new = [p for p in port_names() if p not in before]
        outs = [p for p in new if p.rsplit(":", 1)[1].startswith("out_")]
        ins = [p for p in new if p.rsplit(":", 1)[1].startswith("in_")]
        if outs and ins:
            return {"out": outs[0], "in": ins[0]}
        if time.monotonic() > deadline:
            raise RuntimeError(f"JACK ports did not appear; new ports: {new}")
        time.sleep(0.05)


def start_edge_rt(args: list[str], harness: "Harness", timeout_s: float = 120.0):
    """Start `python -m edge_rt ARGS` (a command that opens one input and one output stream) and wire it
    to the harness: harness out → its in, its out → harness in. Returns (process, stderr lines)."""
    import sys

    before = set(port_names())
    proc = subprocess.Popen([sys.executable, "-m", "edge_rt", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    try:
        deadline = time.monotonic() + timeout_s
        while not any("listening" in line for line in lines):
            if proc.poll() is not None:
                raise RuntimeError(f"edge-rt exited early ({proc.returncode}): {''.join(lines)}")
            if time.monotonic() > deadline:
                raise RuntimeError("edge-rt did not start listening")
            time.sleep(0.1)
        ours = _await_new_ports(before | set(harness.ports.values()))
        connect(harness.ports["out"], ours["in"])
        connect(ours["out"], harness.ports["in"])
    except BaseException:
        proc.kill()  # never leave a live process behind a failed test
        proc.wait(10)
        raise
    return proc, lines


class Harness:
    """Plays a clip (after :meth:`play`) and records everything, in this process's PortAudio client."""

    def __init__(self, clip: np.ndarray):
        import sounddevice as sd

        self._clip = clip.astype(np.float32)
        self._pos = 0
        self._playing = threading.Event()
        self.recorded: list[np.ndarray] = []
        self.play_started_ns = 0

        def out_cb(outdata, frames, t, status):
            outdata[:] = 0
            if self._playing.is_set() and self._pos < len(self._clip):
                n = min(frames, len(self._clip) - self._pos)
                outdata[:n, 0] = self._clip[self._pos : self._pos + n]
                self._pos += n

        def in_cb(indata, frames, t, status):
            self.recorded.append(indata[:, 0].copy())

        before = set(port_names())
        self._out = sd.OutputStream(samplerate=RATE, channels=1, blocksize=PERIOD, dtype="float32", callback=out_cb)
        self._in = sd.InputStream(samplerate=RATE, channels=1, blocksize=PERIOD, dtype="float32", callback=in_cb)
        self._out.start()
        self._in.start()
        # This process's PortAudio client may already hold ports from earlier streams: find ours by difference.
        self.ports = _await_new_ports(before)

    def play(self) -> None:
        self.play_started_ns = time.monotonic_ns()
        self._playing.set()

    @property
    def done_playing(self) -> bool:
        return self._pos >= len(self._clip)

    def audio(self) -> np.ndarray:
        return np.concatenate(self.recorded) if self.recorded else np.zeros(0, np.float32)

    def close(self) -> None:
        for s in (self._out, self._in):
            s.stop()
            s.close()
