"""``edge-rt doctor``: is this device ready to run the service, and if not, what to do.

Each check returns :class:`Check` (name, status, message with the fix). Status
is ``ok``, ``info`` (a fact, e.g. "no GPU: the CPU backend runs"), ``warn``
(works, but look at it) or ``fail`` (blocks running). Heavy or GPU-only
modules are imported lazily, and TensorRT only after a GPU was seen (the lean
TensorRT runtime segfaults without a driver: FACTS.md §3).
"""

from __future__ import annotations

import glob
import importlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from edge_rt.config import COMMON_RATES, Config, check_dir
from edge_rt.ops.doctor_checks import Check, Gpu, blocking
from edge_rt.ops.doctor_pack import check_pack

__all__ = ["Check", "run_checks", "blocking"]

PACKAGES = ("numpy", "onnxruntime", "onnx", "tokenizers", "sentencepiece", "soundfile", "soxr", "rich",
            "sounddevice", "cuda-python", "tensorrt")
REQUIRED = ("numpy", "onnxruntime", "tokenizers", "sentencepiece", "soundfile", "soxr")
HOT_C = 85.0  # a thermal zone this hot throttles the SoC: latency will suffer
MIN_FREE_MB = 500  # below this a recording fails soon (input audio is ~115 MB an hour)
TOOL_TIMEOUT_S = 10


def _tool(args: list[str]) -> str | None:
    """Output of a fixed system tool (never user-controlled arguments), or None."""
    if shutil.which(args[0]) is None:
        return None
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


# -- software ------------------------------------------------------------------
def check_python() -> Check:
    v = platform.python_version()
    ok = sys.version_info >= (3, 10)
    return Check("python", "ok" if ok else "fail",
                 f"Python {v} ({platform.machine()}, {platform.system()} {platform.release()})"
                 + ("" if ok else "; edge-rt needs Python >= 3.10"))


def check_packages() -> list[Check]:
    out = []
    for name in PACKAGES:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = None
        if version:
            extra = ""
            if name == "onnxruntime":
                try:
                    import onnxruntime as ort

                    extra = f"; providers: {', '.join(ort.get_available_providers())}"
                except ImportError as e:
                    out.append(Check(f"package {name}", "fail", f"{name} {version} is installed but does not "
                                     f"import ({e}); reinstall it: `pip install --force-reinstall {name}`"))
                    continue
            out.append(Check(f"package {name}", "ok", f"{name} {version}{extra}"))
        elif name in REQUIRED:
            out.append(Check(f"package {name}", "fail", f"{name} is missing; `pip install edge-rt` installs it"))
        elif name == "sounddevice":
            out.append(Check(f"package {name}", "fail", "sounddevice is missing: live audio cannot run; "
                             "`pip install 'edge-rt[audio]'` and `apt install libportaudio2`"))
        else:
            out.append(Check(f"package {name}", "info", f"{name} not installed (only needed for the GPU backend)"))
    return out


# -- GPU -----------------------------------------------------------------------
def probe_gpu() -> Gpu:
    """Look for an NVIDIA GPU without touching TensorRT: device nodes, nvidia-smi, Jetson markers, cuda-python."""
    jetson = Path("/etc/nv_tegra_release").exists() or bool(glob.glob("/dev/nvhost-ctrl*"))
    nodes = glob.glob("/dev/nvidia[0-9]*") + glob.glob("/dev/nvgpu/*")
    smi = _tool(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"])
    if smi:
        name, driver, cc = ([x.strip() for x in smi.splitlines()[0].split(",")] + ["", "", ""])[:3]
        return Gpu(True, name, driver, cc, jetson, "nvidia-smi")
    count = _cuda_device_count()
    if count:
        return Gpu(True, "CUDA device", "", _cuda_cc(), jetson, "cuda-python")
    if nodes or jetson:
        return Gpu(True, "Jetson integrated GPU" if jetson else "NVIDIA GPU", "", "", jetson, "device nodes")
    return Gpu(False)


def _cuda_device_count() -> int:
    try:
        from cuda.bindings import runtime as cudart  # cuda-python 12.6+/13
    except ImportError:
        try:
            from cuda import cudart
        except ImportError:
            return 0
    try:
        err, count = cudart.cudaGetDeviceCount()
    except Exception:  # no driver: cuda-python raises or returns an error code (FACTS.md §3)
        return 0
    return int(count) if int(err) == 0 else 0


def _cuda_cc() -> str:
    try:
        from cuda.bindings import runtime as cudart
        err, prop = cudart.cudaGetDeviceProperties(0)
        return f"{prop.major}.{prop.minor}" if int(err) == 0 else ""
    except Exception:  # best effort: the capability is informational here
        return ""


def check_gpu(gpu: Gpu) -> Check:
    if not gpu.present:
        return Check("gpu", "info", "no NVIDIA GPU found (/dev/nvidia*, nvidia-smi, cuda-python): the CPU backend "
                     "(ONNX Runtime) runs; on a Jetson install JetPack to use the GPU")
    cc = f", compute capability {gpu.compute_capability}" if gpu.compute_capability else ""
    drv = f", driver {gpu.driver}" if gpu.driver else ""
    return Check("gpu", "ok", f"{gpu.name}{drv}{cc} (found by {gpu.how})")


def tensorrt_version(gpu: Gpu) -> str | None:
    if not gpu.present:
        return None
    try:
        trt = importlib.import_module("tensorrt")
    except ImportError:
        return None
    return getattr(trt, "__version__", "unknown")


def check_tensorrt(gpu: Gpu, version: str | None) -> Check:
    if not gpu.present:
        return Check("tensorrt", "info", "not checked (no GPU): TensorRT engines are not used on this device")
    if version is None:
        return Check("tensorrt", "warn", "a GPU is present but TensorRT does not import: engines run on the CPU; "
                     "install JetPack's python3-libnvinfer (Jetson) or TensorRT from NVIDIA")
    return Check("tensorrt", "ok", f"TensorRT {version}")


# -- audio --------------------------------------------------------------------
def check_audio(config: Config) -> list[Check]:
    from edge_rt.audio.devices import AudioDeviceError, find_device

    a = config.audio
    out = []
    for kind, spec, rate, key, rate_key in (("input", a.device_in, a.rate_in, "device_in", "rate_in"),
                                            ("output", a.device_out, a.rate_out, "device_out", "rate_out")):
        name = f"audio {kind}"
        try:
            dev = find_device(spec or None, kind, a.backend)
        except AudioDeviceError as e:
            out.append(Check(name, "fail", f"audio.{key} = {spec!r}: {e}; set audio.{key} to one of the names "
                             f"`edge-rt devices` shows"))
            continue
        want = rate or int(dev.default_samplerate)
        supported = _supported_rates(dev.index, kind, a.backend)
        label = f"[{dev.index}] {dev.name} ({dev.hostapi})"
        rates = f"supported rates: {', '.join(map(str, supported)) or 'none of ' + str(COMMON_RATES)}"
        if supported and want not in supported:
            out.append(Check(name, "fail", f"{label} does not run at {want} Hz (audio.{rate_key}); {rates}; set audio.{rate_key} to one of them"))
        else:
            out.append(Check(name, "ok", f"{label} at {want} Hz; {rates}"))
    return out


def _supported_rates(index: int, kind: str, backend: str) -> list[int]:
    if backend != "sounddevice":
        return []
    import sounddevice as sd

    check = sd.check_input_settings if kind == "input" else sd.check_output_settings
    rates = []
    for r in COMMON_RATES:
        try:
            check(device=index, samplerate=r, channels=1, dtype="float32")
            rates.append(r)
        except Exception:  # PortAudioError / ValueError: the rate is not supported
            continue
    return rates


# -- the board ----------------------------------------------------------------
def check_power_mode() -> Check | None:
    if shutil.which("nvpmodel") is None:
        return None
    q = _tool(["nvpmodel", "-q"])
    if q is None:
        return Check("power mode", "warn", "nvpmodel -q failed; run `sudo nvpmodel -q` to see the power mode")
    mode = " ".join(q.split())
    return Check("power mode", "ok", f"{mode} (the highest mode gives the lowest latency: `sudo nvpmodel -m 0`)")


def check_thermal(root: str = "/sys/class/thermal") -> list[Check]:
    out = []
    for zone in sorted(glob.glob(os.path.join(root, "thermal_zone*"))):
        try:
            t = int(Path(zone, "temp").read_text().strip()) / 1000.0
            kind = Path(zone, "type").read_text().strip() if Path(zone, "type").exists() else Path(zone).name
        except (OSError, ValueError):
            continue
        hot = t >= HOT_C
        out.append(Check(f"thermal {kind}", "warn" if hot else "ok",
                         f"{t:.1f} °C" + ("; the SoC throttles: add a fan or heatsink, or lower the power mode" if hot else "")))
    return out


def check_disk(config: Config) -> Check:
    if not config.record.dir:
        return Check("disk", "info", "record.dir is not set: sessions are not recorded")
    problem = check_dir(config.record.dir)
    if problem:
        return Check("disk", "fail", f"record.dir = {config.record.dir!r}: {problem}")
    p = Path(config.record.dir)
    existing = next(a for a in (p, *p.parents) if a.exists())
    free_mb = shutil.disk_usage(existing).free / 2**20
    if free_mb < MIN_FREE_MB:
        return Check("disk", "warn", f"only {free_mb:.0f} MB free for recordings under {p}; delete old sessions "
                     f"or set record.audio = false (~115 MB of input audio an hour)")
    return Check("disk", "ok", f"{free_mb / 1024:.1f} GB free for recordings under {p}")


def check_metrics(config: Config) -> Check | None:
    import ipaddress

    if not config.metrics.port:
        return None
    if not ipaddress.ip_address(config.metrics.bind).is_loopback:
        return Check("metrics", "warn", f"metrics.bind = {config.metrics.bind!r} is not a loopback address, but the "
                     "systemd unit only allows localhost (IPAddressAllow=localhost); use 127.0.0.1")
    return Check("metrics", "ok", f"http://{config.metrics.bind}:{config.metrics.port}/metrics")


def run_checks(config: Config, config_problem: str | None = None, verify_hashes: bool = True) -> list[Check]:
    """Every check, in the order a reader fixes them."""
    if config_problem:
        checks = [Check("config", "fail", config_problem)]
    else:
        checks = [Check("config", "ok" if config.path else "info",
                        f"{config.path} is valid" if config.path else "no config file: checking the defaults "
                        "(pass --config /etc/edge-rt/config.toml)")]
    checks.append(check_python())
    checks += check_packages()
    gpu = probe_gpu()
    trt = tensorrt_version(gpu)
    checks += [check_gpu(gpu), check_tensorrt(gpu, trt)]
    checks += check_pack(config, gpu, trt, verify_hashes)
    checks += check_audio(config)
    checks += [c for c in (check_power_mode(), check_metrics(config)) if c is not None]
    checks += check_thermal()
    checks.append(check_disk(config))
    return checks
