"""Atomic file writes for the build: an interrupted build leaves no half-written file."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from edge_rt.atomic import atomic_write

__all__ = ["atomic_write", "copy_file", "copy_tree", "save_onnx", "sha256_file"]


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def save_onnx(model, path: str | Path) -> Path:
    """Check and save an ``onnx.ModelProto`` atomically (weights inline, < 2 GB)."""
    import onnx

    onnx.checker.check_model(model)
    return atomic_write(path, lambda tmp: onnx.save_model(model, str(tmp)))


def copy_file(src: str | Path, dst: str | Path) -> Path:
    """Copy one file atomically."""
    return atomic_write(dst, lambda tmp: shutil.copyfile(src, tmp))


def copy_tree(src: str | Path, dst: str | Path) -> Path:
    """Copy a directory; the destination appears only once complete."""
    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.part")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)
    return dst
