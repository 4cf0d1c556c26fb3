"""Which backend runs a pack's engines here, and the one place that constructs them.

Stages never construct a backend: they ask an :class:`EngineFactory` for ``(stage, model)``
and get an :class:`~edge_rt.backends.base.Engine`. The factory is built from the pack's
manifest and a :class:`BackendChoice`:

- ``cpu``: ONNX Runtime on the CPU, the INT8 (or FP32) ONNX models.
- ``tensorrt``: the pack's serialized TensorRT plans, refused unless they were built for this
  exact TensorRT version and GPU (:mod:`edge_rt.backends.compat`); a model whose TensorRT build
  fell back to ONNX Runtime (recorded in the manifest) runs on the CPU and the choice says so.
- ``auto``: TensorRT when the pack has engines built for this TensorRT and this GPU, otherwise
  the CPU, with the reason.

``tensorrt`` and ``cuda-python`` are imported only after :func:`~edge_rt.backends.compat.current_environment`
found a GPU and TensorRT, so ``cpu`` and ``auto`` work on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

from edge_rt.backends.base import Engine
from edge_rt.errors import EdgeRtError, PackNotBuiltError
from edge_rt.pack import BuiltPack, build_command

__all__ = ["BACKENDS", "BackendChoice", "BackendUnavailableError", "EngineFactory", "OrtEngines", "TrtEngines",
           "choose_backend", "engine_factory"]

BACKENDS = ("cpu", "tensorrt", "auto")
NOT_USED = "TensorRT not used: "  # how an ``auto`` choice of the CPU begins its reason
# Stages that stay on ONNX Runtime under the TensorRT backend, and why (said by doctor and selftest).
CPU_ONLY = {
    "tts": "Piper's waveform length depends on the phoneme durations: a TensorRT run needs an output allocator "
           "(IOutputAllocator), not written yet, and cannot be captured in a CUDA graph",
    "turn": "small; not worth a TensorRT engine (one call per pause, INT8 as shipped)",
}

# ONNX Runtime options per stage or "stage/model" over edge_rt.backends.ort.SessionOptions (OrtEngines(tuning=)).
# "asr/encoder": {"mem_pattern": False}: ONNX Runtime plans one block per input shape, and the encoder has five
#   window buckets; with long utterances (30-s windows) the loop's peak RSS after warm-up was 612 MB with it and
#   580 MB without (`python -m edge_rt.measure.memory` over bench's 4 clips + de_fleurs_test_009, es_fleurs_test_001,
#   fr_fleurs_test_001, default pack into pt; 532 MB either way on the 4 short clips alone, which never use the
#   30-s window). Encoder time, best of 5 per window, five interleaved rounds (`python tools/encoder_pattern_ab.py
#   on|off`), with / without: 5 s 72-104 / 75-103 ms, 10 s 152-176 / 164-209, 15 s 246-281 / 264-289, 20 s
#   359-404 / 394-426, 30 s 671-740 / 640-758 ms: the 20-s window ~5 % slower, the others within the rounds'
#   spread. Turning the arena off as well raised the peak to 664 MB.
# Measured candidates not taken (default pack, INT8, x86, 2 threads, interleaved A/B runs):
#   "asr/decoder": {"prepack": False}  -101 MB RSS (the Whisper decoder's tied embedding is not packed a second
#       time for the logits Gemm) and -0.37 s CPU at load, but transcribing en_jfk took +7 % CPU / +13 % wall;
#       not measured on aarch64. Measured on the FP32 decoder and the INT8 one that kept the projection float;
#       since the `dynamic-all` recipe (2026-12-03) the INT8 projection is int8 and the INT8 decoder holds 59 MB
#       after load (134 MB before), so there is little left to save.
#   "tts": {"graph_optimization": "basic"}  -0.3 s CPU at load (0.51 vs 0.80 s), synthesis as fast (CPU -6 %),
#       but samples differ from piper-tts by up to 2.5e-5, over tests/stages/tts/test_voice.py's atol 1e-5.
#   "asr/decoder": {"spinning": "always"}  the twenty-eighth session's default (2026-12-07; every other session
#       "off"): its threads spun on between its per-token runs. With every other session "run", keeping the
#       decoder's "always" gained nothing over "run" (Whisper 103.4 against 102.8 ms, the pause's work 141 against
#       140 ms: one run of `python tools/spin_ab.py` with that mixed setting added, generated utterances).
#   every session with the config entry "session.set_denormal_as_zero" = "1" (2026-12-07, thirty-first session; AEC3
#       was slowed by a silent reference, FrontEndOptions.reference_floor_dbfs): the pause's work 141.0 -> 137.4 ms,
#       Whisper 103.4 -> 101.0 ms, Piper 181.8 -> 183.3 ms (tools/spin_ab.py's child with "tuned", 3 processes each,
#       alternating; the entry set through a temporary switch): within the spread of its rounds, not taken.
ORT_TUNING: dict[str, dict[str, object]] = {"asr/encoder": {"mem_pattern": False}}


class BackendUnavailableError(EdgeRtError, RuntimeError):
    """The backend asked for cannot run here (no GPU, no TensorRT, or no engines built for them)."""


@dataclass(frozen=True)
class BackendChoice:
    """The backend that will run the pack, and why (printed by the CLI, ``doctor`` and the log)."""

    name: str  # "cpu" | "tensorrt"
    reason: str
    environment: object | None = field(default=None, compare=False)  # TrtEnvironment when name == "tensorrt"


class EngineFactory(Protocol):
    """Builds the engines of a pack for one backend."""

    backend: str

    def load(self, stage: str, model: str, *, precision: str = "fp32", threads: int = 1,
             shared: tuple[str, ...] = ()) -> Engine:
        """The engine of ``stage``/``model`` (e.g. ``("asr", "encoder")``).

        ``shared``: names of initializers other engines of this factory may hold byte for byte (Marian's
        tied embedding ``Wemb`` in its encoder and decoder); the backend keeps one copy where it can.
        """
        ...


def _tensorrt_problem(pack: BuiltPack, environment: Callable[[], object | None]) -> tuple[str | None, object | None]:
    """Why the pack's TensorRT engines cannot run here (None when they can), and the environment."""
    import importlib.util

    from edge_rt.backends.compat import EngineCompatibilityError, TrtEnvironment, problems

    section = pack.manifest.get("tensorrt", {})
    if section.get("status") != "built":
        why = section.get("reason", "the build recorded no TensorRT engines")
        return (f"pack '{pack.name}' has no TensorRT engines ({why}); build them on the device with "
                f"`{build_command(pack.name)}`"), None
    engines = section.get("engines", {})
    if engines and not any(e.get("backend", "tensorrt") == "tensorrt" and e.get("file") for e in engines.values()):
        return "every TensorRT build of the pack fell back to ONNX Runtime (see build_report.md)", None
    if environment is None and importlib.util.find_spec("tensorrt") is None:
        return ("TensorRT is not installed: on a Jetson it comes with JetPack (`sudo apt install "
                "python3-libnvinfer`); elsewhere `pip install tensorrt` from NVIDIA's index, plus "
                "`pip install 'edge-rt[gpu]'` for cuda-python"), None
    from edge_rt.backends.compat import current_environment

    here = (environment or current_environment)()
    try:
        found = problems(TrtEnvironment.from_dict(section), here)
    except EngineCompatibilityError as e:
        return str(e), here
    if here is None:
        return found[0], None
    if found:
        return (f"pack '{pack.name}' was built for another TensorRT/GPU ({'; '.join(found)}); rebuild it here with "
                f"`{build_command(pack.name)} --force`"), here
    return None, here


def choose_backend(pack: BuiltPack, requested: str = "auto",
                   environment: Callable[[], object | None] | None = None) -> BackendChoice:
    """Resolve ``cpu|tensorrt|auto`` for ``pack`` on this machine.

    Args:
        environment: returns the current ``TrtEnvironment`` or None (default: detected); tests pass one.

    Raises:
        BackendUnavailableError: ``tensorrt`` was asked for and cannot run here; the message says what to install
            or rebuild, and that ``--backend cpu`` or ``auto`` runs on the CPU.
        ValueError: ``requested`` is not a backend name.
    """
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {requested!r}")
    if requested == "cpu":
        return BackendChoice("cpu", "asked for (--backend cpu)")
    problem, here = _tensorrt_problem(pack, environment)
    if problem is None:
        return BackendChoice("tensorrt", f"engines built for TensorRT {here.tensorrt_version} on {here.gpu_name} "
                                         f"({here.compute_capability})", environment=here)
    if requested == "tensorrt":
        raise BackendUnavailableError(f"--backend tensorrt cannot run here: {problem}. "
                                      f"Use --backend auto (or cpu) to run on the CPU.")
    return BackendChoice("cpu", NOT_USED + problem)


class OrtEngines:
    """ONNX Runtime on the CPU: the pack's ONNX models, INT8 where the build kept it."""

    backend = "cpu"

    def __init__(self, pack: BuiltPack, tuning: Mapping[str, Mapping[str, object]] | None = None):
        """``tuning``: ``{"stage" or "stage/model": {SessionOptions field: value}}`` (default :data:`ORT_TUNING`);
        a "stage/model" entry wins over its stage's."""
        from edge_rt.backends.ort import SharedInitializers

        self.pack = pack
        self.tuning = dict(ORT_TUNING if tuning is None else tuning)
        self.loaded: dict[str, object] = {}  # "stage/model" -> the file its session was made from
        self.shared = SharedInitializers()  # initializers held once for every engine of this factory

    def session_options(self, stage: str, model: str, threads: int):
        """The ONNX Runtime options of ``stage``/``model``: :attr:`tuning` over the defaults."""
        from edge_rt.backends.ort import SessionOptions

        return SessionOptions(intra_op_threads=threads, **{**self.tuning.get(stage, {}),
                                                           **self.tuning.get(f"{stage}/{model}", {})})

    def load(self, stage: str, model: str, *, precision: str = "fp32", threads: int = 1,
             shared: tuple[str, ...] = ()) -> Engine:
        from edge_rt.backends.ort import OrtEngine

        path = self.pack.model(stage, model, precision)
        engine = OrtEngine(path, self.session_options(stage, model, threads),
                           initializers=self.shared.arrays(path, shared) if shared else None)
        self.loaded[f"{stage}/{model}"] = path
        return engine


class TrtEngines:
    """TensorRT plans of the pack (checked against this TensorRT and GPU); ONNX Runtime for a model whose
    TensorRT build fell back (the manifest records it)."""

    backend = "tensorrt"

    def __init__(self, pack: BuiltPack, environment: object):
        self.pack = pack
        self.environment = environment
        self.on_cpu: dict[str, str] = {}  # "stage/model" -> why it runs on the CPU
        self._cpu = OrtEngines(pack)
        from edge_rt.backends.trt_plan import DeviceAliases

        self.aliases = DeviceAliases()  # e.g. the encoder's cross K/V read in place by the decoder

    def load(self, stage: str, model: str, *, precision: str = "fp32", threads: int = 1,
             shared: tuple[str, ...] = ()) -> Engine:
        if stage in CPU_ONLY:
            self.on_cpu[f"{stage}/{model}"] = CPU_ONLY[stage]
            return self._cpu.load(stage, model, precision=precision, threads=threads, shared=shared)
        # A model with a "<model>_device" twin (the Whisper decoder whose KV cache is an output, so it
        # stays on the GPU: edge_rt/build/export/whisper_device.py) runs as that twin here; the stage
        # recognises the contract by its output names.
        twin = f"{model}_device"
        if twin in self.pack.stage(stage).get("models", {}) and \
                self.pack.manifest.get("tensorrt", {}).get("engines", {}).get(f"{stage}/{twin}", {}).get("file"):
            model = twin
        record = self.pack.manifest.get("tensorrt", {}).get("engines", {}).get(f"{stage}/{model}")
        if record is None or record.get("backend", "tensorrt") != "tensorrt" or not record.get("file"):
            falls = (record or {}).get("fallbacks") or []
            why = "; ".join(f"{f.get('from')}: {f.get('reason')}" for f in falls) or "no TensorRT engine was built"
            self.on_cpu[f"{stage}/{model}"] = why
            return self._cpu.load(stage, model, precision=precision, threads=threads, shared=shared)
        from edge_rt.backends.trt import TrtEngine

        engine = TrtEngine.from_pack(self.pack, stage, model, here=self.environment)
        engine.aliases = self.aliases
        return engine


def engine_factory(pack: BuiltPack, choice: BackendChoice) -> EngineFactory:
    """The factory for ``choice`` (see :func:`choose_backend`)."""
    if choice.name == "cpu":
        return OrtEngines(pack)
    if choice.name == "tensorrt":
        return TrtEngines(pack, choice.environment)
    raise PackNotBuiltError(f"unknown backend {choice.name!r}")
