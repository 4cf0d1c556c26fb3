"""One pool of compute threads at a time: numpy's BLAS threads give the cores to ONNX Runtime's.

The stages compute small things in numpy between engine runs (Whisper's and the turn model's log-mel
is a matrix product). numpy's OpenBLAS runs that product on its own threads, which then keep
spinning for a while; the engine run that follows (ONNX Runtime's intra-op threads, 2 by default)
shares the cores with them. On this project's 2-core x86 a Smart Turn call took 96 ms with both
pools and 44 ms with BLAS on one thread, a Whisper base decode of a 4-s utterance 342 ms against
288 ms (``OPENBLAS_NUM_THREADS=1``, same process otherwise). The products themselves are too small
to gain from BLAS threads.

:func:`limit_blas_threads` caps BLAS at one thread for the whole process through ``threadpoolctl``
(which finds whichever BLAS numpy loaded: OpenBLAS, MKL, BLIS); :func:`~edge_rt.pipeline.load_stages`
calls it, so the runtime (``translate``, ``run``, ``serve``, ``bench``, ``eval``) gets it and the
offline build keeps numpy's default.

ONNX Runtime's own pools spin the same way after a run unless told to stop when the run returns, as
every session is by default (``SessionOptions.spinning``, edge_rt/backends/ort.py).
"""

from __future__ import annotations

__all__ = ["limit_blas_threads"]

_limited = False


def limit_blas_threads() -> None:
    """Cap numpy's BLAS at one thread for this process (idempotent)."""
    global _limited
    if _limited:
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
    _limited = True
