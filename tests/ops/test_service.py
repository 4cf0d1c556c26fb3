"""sd_notify over a real Unix datagram socket, and `edge-rt serve` under a fake systemd over JACK audio."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from edge_rt.ops.service import Notifier, NotifyError
from tests.jack import RATE


def _listener(path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path) if not isinstance(path, bytes) else path)
    s.settimeout(2.0)
    return s


def _messages(sock: socket.socket, n: int) -> list[dict[str, str]]:
    out = []
    for _ in range(n):
        data = sock.recv(4096).decode()
        out.append(dict(line.split("=", 1) for line in data.splitlines()))
    return out


def test_notify_path_socket(tmp_path):
    sock = _listener(tmp_path / "notify")
    n = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "2000000"})
    assert n.enabled and n.watchdog_interval_s == 2.0
    assert n.ready("listening") and n.status("translating utterance 1")
    assert not n.status("translating utterance 1")  # unchanged: not sent again
    assert n.watchdog(now=100.0) and not n.watchdog(now=100.5) and n.watchdog(now=101.1)  # every half interval
    assert n.stopping()
    msgs = _messages(sock, 5)
    assert msgs[0]["READY"] == "1" and msgs[0]["STATUS"] == "listening" and msgs[0]["MAINPID"] == str(os.getpid())
    assert msgs[1] == {"STATUS": "translating utterance 1"}
    assert msgs[2] == {"WATCHDOG": "1"} and msgs[3] == {"WATCHDOG": "1"}
    assert msgs[4]["STOPPING"] == "1"
    n.close()
    sock.close()


def test_notify_abstract_socket():
    name = f"edge-rt-test-{uuid.uuid4().hex}"
    sock = _listener(b"\0" + name.encode())
    n = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
    assert n.ready() and _messages(sock, 1) == [{"READY": "1"}]
    assert not n.watchdog_enabled  # no WATCHDOG_USEC
    n.close()
    sock.close()


def test_outside_systemd_everything_is_a_noop():
    n = Notifier.from_env({})
    assert not n.enabled and not n.ready() and not n.watchdog()


def test_watchdog_for_another_pid_is_ignored(tmp_path):
    n = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "s"), "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert not n.watchdog_enabled


def test_a_vanished_socket_is_not_fatal(tmp_path):
    n = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "gone")})
    assert not n.ready() and n.errors == 1 and n.last_error


def test_bad_socket_address_is_named():
    with pytest.raises(NotifyError, match="NOTIFY_SOCKET"):
        Notifier.from_env({"NOTIFY_SOCKET": "relative/path"})




def test_serve_notifies_systemd_and_stops_on_sigterm(jack, default_pack, tmp_path):
    sock = _listener(tmp_path / "notify")
    sock.settimeout(0.2)
    config = tmp_path / "config.toml"
    config.write_text(f'[audio]\ndevice_in = "0"\ndevice_out = "0"\nrate_in = {RATE}\nrate_out = {RATE}\n'
                      f'[translate]\nto = "pt"\nfrom = "en"\n[record]\ndir = "{tmp_path / "sessions"}"\naudio = false\n')
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "1000000"}
    proc = subprocess.Popen([sys.executable, "-m", "edge_rt", "serve", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True).start()
    msgs: list[dict[str, str]] = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"serve exited early: {''.join(err)}"
            try:
                data = sock.recv(4096).decode()
            except socket.timeout:
                continue
            msgs.append(dict(line.split("=", 1) for line in data.splitlines()))
            ready = next((i for i, m in enumerate(msgs) if m.get("READY") == "1"), None)
            if ready is not None and sum(m.get("WATCHDOG") == "1" for m in msgs[ready:]) >= 3:
                break
        else:
            pytest.fail(f"no READY=1 and 3 watchdog pings: {msgs}; {''.join(err)}")
        assert any(m.get("STATUS", "").startswith("loading engines") for m in msgs)
        assert msgs[ready].get("STATUS") == "listening"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert proc.returncode == 0, "".join(err)
    finally:
        if proc.poll() is None:
            proc.kill()
    sock.settimeout(1.0)
    try:
        while True:
            data = sock.recv(4096).decode()
            msgs.append(dict(line.split("=", 1) for line in data.splitlines()))
    except socket.timeout:
        pass
    assert any(m.get("STOPPING") == "1" for m in msgs), msgs
    sessions = list((tmp_path / "sessions").glob("session-*/session.json"))
    assert len(sessions) == 1 and "ended_at" in sessions[0].read_text()
    sock.close()


def test_serve_bad_config_exits_78(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[translate]\nto = "pt"\ntoo = 1\n')
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "serve", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 78 and "did you mean 'translate.to'" in proc.stderr, proc.stderr


def test_the_service_loop_options_follow_the_loop_config():
    """[loop] keys reach the service's LoopOptions (ops/serve.loop_options); 0 turns a feature off."""
    from edge_rt.config import Config
    from edge_rt.loop.context import ContextOptions
    from edge_rt.loop.options import LoopOptions
    from edge_rt.ops.serve import loop_options

    default = loop_options(Config())  # the config's defaults are the options' own
    assert default.repeat_words == LoopOptions(target="pt").repeat_words == 3
    assert default.context.lend_within_s == ContextOptions().lend_within_s == 2.0 and default.keep_traces == 1000
    assert default.noisy_preroll is not None and default.split is not None and default.redecode is not None
    assert default.sound_start == LoopOptions(target="pt").sound_start is not None
    off = loop_options(Config.from_dict({"loop": {"repeat_words": 0, "lend_within_s": 0, "noisy_preroll_below": 0,
                                                  "sound_start_above": 0,
                                                  "split_below": 0, "redecode_below": 0, "complete_after_ms": 128},
                                         "translate": {"to": "de", "from": "en"}}))
    assert off.repeat_words is None and off.context.lend_within_s is None
    assert off.noisy_preroll is None and off.split is None and off.redecode is None and off.sound_start is None
    assert off.turn.complete_after_ms == 128 and (off.target, off.source) == ("de", "en")
    assert loop_options(Config.from_dict({"loop": {"repeat_words": 4, "lend_within_s": 1.5}})).repeat_words == 4
    for key, bad in (("repeat_words", -1), ("lend_within_s", 9.0)):
        with pytest.raises(Exception, match=key):
            Config.from_dict({"loop": {key: bad}})
