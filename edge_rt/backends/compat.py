"""Is a built TensorRT engine usable here? (exact TensorRT version, GPU name and compute capability.)

A serialized TensorRT engine only runs on the TensorRT version and the GPU model it was
built for; loading it elsewhere fails deep inside ``deserialize_cuda_engine`` (or, with
the lean runtime and no driver, segfaults: docs/FACTS.md §3). So the build records its
environment in ``manifest.json`` and the runtime compares before it loads anything.

:func:`problems` is pure (tested on CPU); :func:`current_environment` looks at the
machine, checking for a GPU before TensorRT is ever imported.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass

from edge_rt.errors import EdgeRtError

__all__ = ["TrtEnvironment", "EngineCompatibilityError", "problems", "notes", "check", "current_environment",
           "gpu_info", "auto_backend_reason", "rebuild_command"]


class EngineCompatibilityError(EdgeRtError, RuntimeError):
    """A TensorRT engine was built for another TensorRT version or GPU."""


@dataclass(frozen=True)
class TrtEnvironment:
    """Where an engine was built, or where we are now."""

    tensorrt_version: str  # tensorrt.__version__, exact, e.g. "10.3.0.30"
    gpu_name: str  # e.g. "Orin (nvgpu)"
    compute_capability: str  # "major.minor", e.g. "8.7"
    gpu_memory_mb: int | None = None  # total device memory (informational: engines do not depend on it)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrtEnvironment":
        try:
            mem = d.get("gpu_memory_mb")
            return cls(str(d["tensorrt_version"]), str(d["gpu_name"]), str(d["compute_capability"]),
                       int(mem) if mem is not None else None)
        except KeyError as e:
            raise EngineCompatibilityError(f"the manifest's tensorrt section lacks {e}; rebuild the pack") from None


def rebuild_command(pack: str) -> str:
    return f"python tools/build_engines.py --pack {pack} --force"


def problems(built: TrtEnvironment, here: TrtEnvironment | None) -> list[str]:
    """Why an engine built in ``built`` cannot run ``here`` (empty list: it can).

    A serialized plan is tied to the exact TensorRT version that wrote it (we do not build with
    the version-compatible flag: it costs speed) and to the GPU it was built on: the same name
    and compute capability (tactics were chosen and timed for that GPU). Both compare exactly.
    """
    if here is None:
        return ["no CUDA GPU with TensorRT is present on this machine"]
    out = []
    if built.tensorrt_version.strip() != here.tensorrt_version.strip():
        out.append(f"built with TensorRT {built.tensorrt_version}, this machine has TensorRT {here.tensorrt_version}")
    if built.compute_capability != here.compute_capability:
        out.append(f"built for compute capability {built.compute_capability} ({built.gpu_name}), this GPU is "
                   f"{here.compute_capability} ({here.gpu_name})")
    elif built.gpu_name.strip() != here.gpu_name.strip():
        out.append(f"built on GPU {built.gpu_name!r}, this GPU is {here.gpu_name!r}")
    return out


def notes(built: TrtEnvironment, here: TrtEnvironment | None) -> list[str]:
    """Differences that do not stop an engine from loading (device memory), for ``doctor``."""
    if here is None or built.gpu_memory_mb is None or here.gpu_memory_mb is None:
        return []
    if built.gpu_memory_mb != here.gpu_memory_mb:
        return [f"built on a GPU with {built.gpu_memory_mb} MB, this one has {here.gpu_memory_mb} MB"]
    return []


def check(built: TrtEnvironment, here: TrtEnvironment | None, pack: str) -> None:
    """Raise :class:`EngineCompatibilityError` naming every mismatch and the rebuild command."""
    found = problems(built, here)
    if found:
        raise EngineCompatibilityError(
            f"the TensorRT engines of pack '{pack}' cannot run here: {'; '.join(found)}. Rebuild them on this "
            f"machine with `{rebuild_command(pack)}`, or run on the CPU with `--backend cpu`"
        )


def _cudart():
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        from cuda import cudart  # type: ignore[no-redef]
    return cudart


def gpu_info() -> tuple[str, str, int] | None:
    """(name, "major.minor", memory MB) of CUDA device 0 through cuda-python, or None without a driver or GPU.

    cuda-python imports anywhere; without a driver its calls return an error code
    (FACTS §3), so this never crashes a CPU-only machine.
    """
    if importlib.util.find_spec("cuda") is None:
        return None
    try:
        cudart = _cudart()
        err, count = cudart.cudaGetDeviceCount()
        if int(err) != 0 or count < 1:
            return None
        err, props = cudart.cudaGetDeviceProperties(0)
        if int(err) != 0:
            return None
        name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
        return name.strip("\0 "), f"{props.major}.{props.minor}", int(props.totalGlobalMem) >> 20
    except Exception:  # any binding or driver failure means: no usable GPU
        return None


def current_environment() -> TrtEnvironment | None:
    """This machine's TensorRT + GPU, or None. TensorRT is imported only after a GPU was found."""
    if importlib.util.find_spec("tensorrt") is None:
        return None
    gpu = gpu_info()
    if gpu is None:
        return None
    import tensorrt

    return TrtEnvironment(tensorrt.__version__, gpu[0], gpu[1], gpu[2])


def auto_backend_reason(pack, here: TrtEnvironment | None | bool = False) -> tuple[str, str]:
    """What ``--backend auto`` picks for a built pack, and why: ``("tensorrt"|"cpu", reason)``.

    ``here`` False (default): detect (GPU first, TensorRT only after); None: no GPU/TensorRT.
    The decision itself is :func:`edge_rt.backends.factory.choose_backend`'s.
    """
    from edge_rt.backends.factory import NOT_USED, choose_backend

    choice = choose_backend(pack, "auto", environment=None if here is False else (lambda: here))
    return choice.name, choice.reason.removeprefix(NOT_USED)
