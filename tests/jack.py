"""A JACK dummy server and a harness that plays into and records from another JACK client.

The dummy driver is an exactly clocked sound card without hardware (see
../shared/docs/FACTS.md §4). `.ci/run` installs jackd2 and libportaudio2.
"""

from __future__ import annotations

import bisect
import os
import shutil
import signal
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


def stop_edge_rt(proc, lines: list[str]) -> str:
    """Ctrl-C an edge-rt started by :func:`start_edge_rt`: it must stop cleanly (exit 0). Returns its stdout."""
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(lines)
    return out


def release(proc, harness: "Harness") -> None:
    """After a live test, passed or failed: kill an edge-rt still running, close the harness's client."""
    if proc is not None and proc.poll() is None:
        proc.kill()
    harness.close()


class Harness:
    """Plays a clip (after :meth:`play`) and records everything, as its own JACK client.

    It talks to libjack directly (JACK-Client), not through PortAudio: PortAudio's JACK host API can
    crash while closing a stream whose peer just went away (seen in CI as a segfault in
    ``Pa_CloseStream``), and a crash here would take the whole test run with it.  Edge-rt itself still
    goes through PortAudio, the path it uses on a real sound card.

    ``feedback=(gain, delay samples)`` plays what it records back into its output, that much later and
    scaled, mixed with the clip: a loudspeaker beside the microphone.
    """

    def __init__(self, clip: np.ndarray, feedback: tuple[float, int] | None = None):
        try:
            import jack
        except (ImportError, OSError) as e:
            pytest.fail(f"the JACK test harness needs JACK-Client and libjack ({e}); "
                        f"`pip install -e .[dev]` and `apt install jackd2`")
        self._clip = clip.astype(np.float32)
        self._pos = 0
        self._playing = threading.Event()
        self._feedback = feedback
        self._echo = np.zeros(feedback[1] if feedback else 0, np.float32)  # recorded, not yet played back
        self.recorded: list[np.ndarray] = []
        self.play_started_ns = 0
        # (clip position, monotonic ns, recorded samples before it) at each played period
        self.timeline: list[tuple[int, int, int]] = []
        self.play_from = 0  # sample of audio() recorded while the clip's first sample was played
        self._recorded_n = 0  # samples in recorded
        self._client = jack.Client(f"edge_rt_harness_{os.getpid()}", no_start_server=True)
        rate = self._client.samplerate
        if rate != RATE:
            self._client.close()
            pytest.fail(f"the JACK server runs at {rate} Hz, the tests need {RATE} Hz")
        out = self._client.outports.register("out")
        inp = self._client.inports.register("in")

        @self._client.set_process_callback
        def process(frames):
            buf = out.get_array()
            buf[:] = 0
            if self._feedback is not None:
                gain, _ = self._feedback
                self._echo = np.concatenate([self._echo, inp.get_array()])
                buf[:] = gain * self._echo[:frames]
                self._echo = self._echo[frames:]
            if self._playing.is_set() and self._pos < len(self._clip):
                self.timeline.append((self._pos, time.monotonic_ns(), self._recorded_n))
                if self._pos == 0:
                    self.play_from = self._recorded_n
                n = min(frames, len(self._clip) - self._pos)
                buf[:n] += self._clip[self._pos : self._pos + n]
                self._pos += n
            self.recorded.append(inp.get_array().copy())
            self._recorded_n += frames

        self._client.activate()
        self.ports = {"out": out.name, "in": inp.name}

    def play(self) -> None:
        self.play_started_ns = time.monotonic_ns()
        self._playing.set()

    def append(self, clip: np.ndarray) -> int:
        """Play ``clip`` after what is queued (at once when all of it was played); returns its first position."""
        start = max(len(self._clip), self._pos)
        self._clip = np.concatenate([self._clip, clip.astype(np.float32)])  # swapped whole: the callback sees either
        return start

    def _period(self, position: int) -> tuple[int, int, int]:
        """The timeline entry of the period that played clip sample ``position``: the track pauses between
        appended clips (while the harness waits for edge-rt), so positions are not recording offsets."""
        return self.timeline[max(0, bisect.bisect_right(self.timeline, (position, float("inf"), 0)) - 1)]

    def clip_ns(self, position: int) -> int:
        """Monotonic time at which clip sample ``position`` was played (the JACK clock may lag the wall)."""
        pos, ns, _ = self._period(position)
        return ns + (position - pos) * 1_000_000_000 // RATE

    def recorded_at(self, position: int) -> int:
        """The sample of :meth:`audio` recorded while clip sample ``position`` was played."""
        pos, _, n = self._period(position)
        return n + position - pos

    @property
    def done_playing(self) -> bool:
        return self._pos >= len(self._clip)

    def audio(self) -> np.ndarray:
        return np.concatenate(self.recorded) if self.recorded else np.zeros(0, np.float32)

    def close(self) -> None:
        self._client.deactivate()
        self._client.close()


def run_live(clip: np.ndarray, args: list[str], tail_s: float) -> np.ndarray:
    """`edge-rt run ARGS` on the dummy server's ports at RATE while ``clip`` plays into its capture port at
    real time; stopped with Ctrl-C ``tail_s`` after the clip ended (for its last utterance); what it played."""
    harness = Harness(clip)
    proc = None
    try:
        proc, lines = start_edge_rt(["run", *args, "--device-in", "0", "--device-out", "0", "--rate-in", str(RATE),
                                     "--rate-out", str(RATE)], harness)
        harness.play()
        while not harness.done_playing:
            time.sleep(0.1)
        time.sleep(tail_s)
        stop_edge_rt(proc, lines)  # Ctrl-C stops cleanly
    finally:
        release(proc, harness)
    return harness.audio()
