"""Find named initializers in an ``.onnx`` file without parsing the model.

The runtime loads models with ONNX Runtime only; the ``onnx`` package costs ~0.3 s to import and
parses the whole model (tens of MB) to reach one tensor. What the runtime needs from a file is
the bytes of a few large initializers (Marian's tied embedding matrix, held by both the encoder
and the decoder, is handed to ONNX Runtime once: :mod:`edge_rt.backends.ort`). This module walks
the protobuf wire format of ``ModelProto.graph.initializer`` (field numbers from ``onnx.proto``)
and skips everything else by length, so reading one 31 MB tensor reads those 31 MB and a few
kilobytes of headers.

Tensors stored inline as ``raw_data`` and tensors in an external-data file (the build writes every
model's weights to ``<name>.onnx.data``: edge_rt/build/files.py) are found; a tensor in typed fields
(``float_data``) is reported absent, and the caller loads the model as it is.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

__all__ = ["TensorLocation", "find_initializers", "read_initializer"]

# onnx.proto field numbers
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME, _TENSOR_RAW_DATA = 1, 2, 8, 9
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14  # StringStringEntryProto list; 1 = EXTERNAL
_ENTRY_KEY, _ENTRY_VALUE = 1, 2
# wire types
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# TensorProto.DataType -> numpy (the types a shared weight can have)
_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
           10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


@dataclass(frozen=True)
class TensorLocation:
    """Where an initializer's bytes lie: in the model file's ``raw_data``, or in its external-data file."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int  # bytes from the start of the file
    nbytes: int
    file: str | None = None  # the external-data file, relative to the model's folder (None: the model file)


def _varint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed protobuf varint")


def _fields(buf, start: int, end: int):
    """(field number, wire type, value or (offset, length) for LEN fields) of one message."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
            yield field, wire, value
        elif wire == _LEN:
            n, pos = _varint(buf, pos)
            yield field, wire, (pos, n)
            pos += n
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} at byte {pos}")
    if pos != end:
        raise ValueError("protobuf message overruns its length")


def _text(buf, value) -> str:
    return bytes(buf[value[0] : value[0] + value[1]]).decode("utf-8")


def _entry(buf, value) -> tuple[str, str]:
    """One StringStringEntryProto (external_data's key and value)."""
    kv = {f: _text(buf, v) for f, w, v in _fields(buf, value[0], value[0] + value[1]) if w == _LEN}
    return kv.get(_ENTRY_KEY, ""), kv.get(_ENTRY_VALUE, "")


def _tensor(buf, start: int, end: int, wanted: set[str]) -> TensorLocation | None:
    name, dtype, dims, raw, external, ext = None, None, [], None, False, {}
    for field, wire, value in _fields(buf, start, end):
        if field == _TENSOR_NAME and wire == _LEN:
            name = _text(buf, value)
            if name not in wanted:
                return None
        elif field == _TENSOR_DIMS:
            if wire == _LEN:  # packed
                p, stop = value[0], value[0] + value[1]
                while p < stop:
                    d, p = _varint(buf, p)
                    dims.append(d)
            else:
                dims.append(value)
        elif field == _TENSOR_DATA_TYPE:
            dtype = value
        elif field == _TENSOR_RAW_DATA:
            raw = value
        elif field == _TENSOR_EXTERNAL_DATA and wire == _LEN:
            key, val = _entry(buf, value)
            ext[key] = val
        elif field == _TENSOR_DATA_LOCATION:
            external = value == 1
    if name is None or dtype not in _DTYPES:
        return None
    dt = np.dtype(_DTYPES[dtype])
    nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    shape = tuple(int(d) for d in dims)
    if external:
        location = ext.get("location", "")
        if not location or Path(location).is_absolute() or ".." in Path(location).parts:
            return None  # not a file beside the model: left to ONNX Runtime (which refuses it)
        offset, length = int(ext.get("offset", 0)), int(ext.get("length", nbytes))
        return TensorLocation(name, dt, shape, offset, nbytes, location) if length == nbytes else None
    if raw is None or raw[1] != nbytes:
        return None
    return TensorLocation(name, dt, shape, raw[0], raw[1])


def find_initializers(path: str | Path, names: Iterable[str]) -> dict[str, TensorLocation]:
    """Where the initializers ``names`` of ``path`` lie; names not found (or not stored as raw data) are left out.

    Raises:
        ValueError: the file is not a well-formed ONNX protobuf.
    """
    wanted = set(names)
    found: dict[str, TensorLocation] = {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        try:
            for field, wire, value in _fields(buf, 0, len(buf)):
                if field != _MODEL_GRAPH or wire != _LEN:
                    continue
                g0, gn = value
                for gfield, gwire, gvalue in _fields(buf, g0, g0 + gn):
                    if gfield == _GRAPH_INITIALIZER and gwire == _LEN:
                        loc = _tensor(buf, gvalue[0], gvalue[0] + gvalue[1], wanted)
                        if loc is not None:
                            found[loc.name] = loc
        except IndexError as e:
            raise ValueError(f"{path} is not a well-formed ONNX file (truncated protobuf)") from e
    return found


def read_initializer(path: str | Path, location: TensorLocation) -> np.ndarray:
    """The tensor at ``location`` of the model ``path`` as a new C-contiguous array (one read, no parse)."""
    if location.file is not None:
        path = Path(path).parent / location.file
    with open(path, "rb") as f:
        f.seek(location.offset)
        data = np.fromfile(f, dtype=location.dtype, count=location.nbytes // location.dtype.itemsize)
    if data.nbytes != location.nbytes:
        raise ValueError(f"{path} ends inside initializer {location.name!r}; the file is truncated")
    return data.reshape(location.shape)
