"""Is a built TensorRT engine usable here? (TensorRT version, GPU, compute capability.)

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

__all__ = ["TrtEnvironment", "EngineCompatibilityError", "problems", "check", "current_environment", "gpu_info"]


class EngineCompatibilityError(EdgeRtError, RuntimeError):
    """A TensorRT engine was built for another TensorRT version or GPU."""


@dataclass(frozen=True)
class TrtEnvironment:
    """Where an engine was built, or where we are now."""

    tensorrt_version: str  # e.g. "10.3.0"
    gpu_name: str  # e.g. "Orin (nvgpu)"
    compute_capability: str  # "major.minor", e.g. "8.7"

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrtEnvironment":
        try:
            return cls(str(d["tensorrt_version"]), str(d["gpu_name"]), str(d["compute_capability"]))
        except KeyError as e:
            raise EngineCompatibilityError(f"the manifest's tensorrt section lacks {e}; rebuild the pack") from None


def _major_minor(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


def problems(built: TrtEnvironment, here: TrtEnvironment | None) -> list[str]:
    """Why an engine built in ``built`` cannot run ``here`` (empty list: it can).

    TensorRT engines are tied to the exact TensorRT major.minor (no cross-version
    compatibility unless built with the version-compatible flag, which we do not use) and
    to the compute capability; a different GPU name with the same capability is allowed
    but worth rebuilding for (the tactics were timed on the other GPU), so it is not an error.
    """
    if here is None:
        return ["no CUDA GPU with TensorRT is present on this machine"]
    out = []
    if _major_minor(built.tensorrt_version) != _major_minor(here.tensorrt_version):
        out.append(f"built with TensorRT {built.tensorrt_version}, this machine has TensorRT {here.tensorrt_version}")
    if built.compute_capability != here.compute_capability:
        out.append(f"built for compute capability {built.compute_capability} ({built.gpu_name}), this GPU is "
                   f"{here.compute_capability} ({here.gpu_name})")
    return out


def check(built: TrtEnvironment, here: TrtEnvironment | None, pack: str) -> None:
    """Raise :class:`EngineCompatibilityError` naming every mismatch and the rebuild command."""
    found = problems(built, here)
    if found:
        raise EngineCompatibilityError(
            f"the TensorRT engines of pack '{pack}' cannot run here: {'; '.join(found)}. Rebuild them on this "
            f"machine with `python tools/build_engines.py --pack {pack} --force`, or run with the ONNX Runtime "
            f"engines (the default on CPU)"
        )


def gpu_info() -> tuple[str, str] | None:
    """(name, "major.minor") of CUDA device 0 through cuda-python, or None without a driver or GPU.

    cuda-python imports anywhere; without a driver its calls return an error code
    (FACTS §3), so this never crashes a CPU-only machine.
    """
    if importlib.util.find_spec("cuda") is None:
        return None
    try:
        try:
            from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
        except ImportError:
            from cuda import cudart  # type: ignore[no-redef]
        err, count = cudart.cudaGetDeviceCount()
        if int(err) != 0 or count < 1:
            return None
        err, props = cudart.cudaGetDeviceProperties(0)
        if int(err) != 0:
            return None
        name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
        return name.strip("\0 "), f"{props.major}.{props.minor}"
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

    return TrtEnvironment(tensorrt.__version__, gpu[0], gpu[1])
