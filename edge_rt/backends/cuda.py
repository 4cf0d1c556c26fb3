"""cuda-python's runtime API, imported lazily, and the checks every call site needs.

Only the TensorRT backend uses it (after :func:`edge_rt.backends.compat.current_environment`
found a GPU); cuda-python imports anywhere and reports a missing driver as an error code.
"""

from __future__ import annotations

from edge_rt.backends.trt_plan import TrtError

__all__ = ["cudart", "check", "ok"]


def cudart():
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # type: ignore[no-redef]
        except ImportError as e:
            raise TrtError(f"the TensorRT backend needs cuda-python ({e}): `pip install 'edge-rt[gpu]'`") from e
    return cudart


def check(result, what: str):
    """cuda-python returns (err, *values); raise on an error, return the values."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise TrtError(f"{what} failed with CUDA error {int(err)} ({err})")
    return values[0] if len(values) == 1 else (tuple(values) or None)


def ok(result, what: str) -> None:
    """TensorRT setters return False (or raise RuntimeError in some bindings) on failure."""
    if result is False:
        raise TrtError(f"{what} returned False (see the TensorRT log above)")
