"""systemd integration without a dependency: ``sd_notify`` over a Unix datagram socket, and the watchdog.

systemd passes ``$NOTIFY_SOCKET`` (a path, or an abstract name starting with
``@``) and, with ``WatchdogSec=``, ``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``).
The protocol is one datagram of ``KEY=VALUE`` lines per message
(https://www.freedesktop.org/software/systemd/man/sd_notify.html).

Outside systemd (no ``$NOTIFY_SOCKET``) every call is a cheap no-op, so the
same code runs in a terminal. A notification that fails to send never takes
the service down: the error is counted and kept.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Mapping

from edge_rt.errors import EdgeRtError

__all__ = ["Notifier", "NotifyError"]


class NotifyError(EdgeRtError, ValueError):
    """``$NOTIFY_SOCKET`` holds an address this module cannot use."""


class Notifier:
    """Sends READY/STATUS/STOPPING/WATCHDOG messages to systemd.

    ``watchdog()`` is meant to be called from the real-time loop's own
    iterations (a stuck loop then stops pinging and systemd restarts the
    service); it sends at most one ping per half watchdog interval.
    """

    def __init__(self, socket_address: str | None, watchdog_usec: int = 0):
        self._address = _address(socket_address) if socket_address else None
        self._sock: socket.socket | None = None
        self.watchdog_interval_s = watchdog_usec / 1e6 if watchdog_usec > 0 else 0.0
        self._next_ping = 0.0
        self._status = ""
        self.sent = 0
        self.errors = 0
        self.last_error = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "Notifier":
        """Read ``NOTIFY_SOCKET``, ``WATCHDOG_USEC`` and ``WATCHDOG_PID`` as sd_notify(3) does."""
        usec = 0
        raw = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        if raw.isdigit() and (not pid or pid == str(os.getpid())):  # the watchdog is for another process
            usec = int(raw)
        return cls(env.get("NOTIFY_SOCKET") or None, usec)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def watchdog_enabled(self) -> bool:
        return self.enabled and self.watchdog_interval_s > 0

    def send(self, **fields: str | int) -> bool:
        """Send one message of ``KEY=VALUE`` lines; True if it was delivered."""
        if self._address is None:
            return False
        msg = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(msg, self._address)
        except OSError as e:  # systemd went away or the socket is gone: never fatal
            self.errors += 1
            self.last_error = str(e)
            return False
        self.sent += 1
        return True

    def ready(self, status: str = "") -> bool:
        self._status = status
        return self.send(READY=1, STATUS=status, MAINPID=os.getpid()) if status else self.send(READY=1)

    def status(self, text: str) -> bool:
        """Send STATUS= only when it changed (it shows in `systemctl status`)."""
        if text == self._status:
            return False
        self._status = text
        return self.send(STATUS=text)

    def stopping(self, status: str = "stopping") -> bool:
        self._status = status
        return self.send(STOPPING=1, STATUS=status)

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for more start-up time (while waiting for an audio device before READY)."""
        return self.send(EXTEND_TIMEOUT_USEC=int(seconds * 1e6))

    def watchdog(self, now: float | None = None) -> bool:
        """Ping if half the watchdog interval has passed since the last ping."""
        if not self.watchdog_enabled:
            return False
        now = time.monotonic() if now is None else now
        if now < self._next_ping:
            return False
        self._next_ping = now + self.watchdog_interval_s / 2
        return self.send(WATCHDOG=1)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _address(name: str) -> str | bytes:
    """``@name`` is an abstract socket (leading NUL); anything else a filesystem path."""
    if name.startswith("@"):
        return b"\0" + name[1:].encode()
    if not name.startswith("/"):
        raise NotifyError(f"NOTIFY_SOCKET must be an absolute path or an @abstract name, got {name!r}; "
                          f"unset it to run outside systemd")
    return name
