"""Read a CTranslate2 ``model.bin`` into numpy arrays (no ctranslate2 needed).

Format (binary version 6, little-endian; see docs/FACTS.md section 2)::

    u32 binary_version, str spec_name, u32 spec_revision, u32 n_variables
    n_variables x (str name, u8 rank, rank x u32 dim, u8 dtype, u32 n_bytes, n_bytes raw)
    u32 n_aliases, n_aliases x (str alias, str target)

A ``str`` is a u16 byte length (counting a trailing NUL) then the bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Mapping

import numpy as np

from edge_rt.errors import EdgeRtError

BINARY_VERSION = 6  # the only layout this reader knows

# dtype code in model.bin -> numpy dtype
DTYPES: Mapping[int, np.dtype] = {
    0: np.dtype("<f4"),
    1: np.dtype("i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f2"),
    # 5 (bfloat16) is read as raw uint16 and widened in _decode.
    5: np.dtype("<u2"),
}
BF16 = 5


class Ct2FormatError(EdgeRtError, ValueError):
    """The file is not a CTranslate2 model.bin this reader understands."""


@dataclass(frozen=True)
class Ct2Model:
    """A parsed ``model.bin``.

    Attributes:
        spec: spec name, e.g. ``"WhisperSpec"``.
        revision: spec revision (``WhisperSpec`` is 3).
        variables: name -> array, in the stored dtype (float16 weights stay float16);
            aliases are resolved, so ``decoder/projection/weight`` is present too.
    """

    spec: str
    revision: int
    variables: Mapping[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.variables[name]
        except KeyError:
            raise Ct2FormatError(
                f"{self.spec} model has no variable {name!r}; it is not the model this code expects "
                f"(first variables: {sorted(self.variables)[:5]})"
            ) from None

    def f32(self, name: str) -> np.ndarray:
        """A variable widened to float32 (C-contiguous)."""
        return np.ascontiguousarray(self[name], dtype=np.float32)

    def scalar(self, name: str) -> int:
        return int(self[name].reshape(()))


def _read(f: BinaryIO, fmt: str):
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise Ct2FormatError("unexpected end of file")
    return struct.unpack("<" + fmt, data)[0]


def _read_str(f: BinaryIO) -> str:
    n = _read(f, "H")
    raw = f.read(n)
    if len(raw) != n:
        raise Ct2FormatError("unexpected end of file in a string")
    return raw.rstrip(b"\0").decode("utf-8")


def _decode(raw: bytes, dims: tuple[int, ...], code: int) -> np.ndarray:
    if code not in DTYPES:
        raise Ct2FormatError(f"unknown dtype code {code} (known: {sorted(DTYPES)})")
    arr = np.frombuffer(raw, dtype=DTYPES[code]).reshape(dims)
    if code == BF16:  # bfloat16 is the top half of a float32
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    return arr


def read_ct2(path: str | Path) -> Ct2Model:
    """Parse a CTranslate2 ``model.bin``.

    Raises:
        Ct2FormatError: the file is truncated, of another binary version, or malformed.
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    with open(path, "rb") as f:
        try:
            version = _read(f, "I")
            if version != BINARY_VERSION:
                raise Ct2FormatError(
                    f"{path}: CTranslate2 binary version {version}; this reader knows version "
                    f"{BINARY_VERSION} (re-convert the model with ctranslate2 >= 3)"
                )
            spec = _read_str(f)
            revision = _read(f, "I")
            variables: dict[str, np.ndarray] = {}
            for _ in range(_read(f, "I")):
                name = _read_str(f)
                rank = _read(f, "B")
                dims = tuple(_read(f, "I") for _ in range(rank))
                code = _read(f, "B")
                n_bytes = _read(f, "I")
                raw = f.read(n_bytes)
                if len(raw) != n_bytes:
                    raise Ct2FormatError(f"variable {name!r} is truncated")
                variables[name] = _decode(raw, dims, code)
            for _ in range(_read(f, "I")):
                alias, target = _read_str(f), _read_str(f)
                if target in variables:
                    variables[alias] = variables[target]
        except Ct2FormatError as e:
            raise Ct2FormatError(f"{path} is not a valid CTranslate2 model.bin: {e}") from e
    return Ct2Model(spec=spec, revision=revision, variables=variables)
