"""Atomic writes: a file appears complete or not at all (interrupted builds, crashes, power loss)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` and move the result onto ``path`` only if it succeeded."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        os.chmod(tmp_path, file_mode())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def file_mode() -> int:
    """The mode a new file gets from ``open()`` under this process's umask (0644 under 022): readable by
    the service's own user when the build ran as another."""
    return 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
