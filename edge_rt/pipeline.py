"""The one place that builds a running pipeline: pack + options + backend -> stages -> Loop.

Every entry point (``translate``, ``run``, ``serve``, ``replay``, ``bench``, ``eval``, the soak)
goes through :class:`Pipeline`::

    pipe = Pipeline.load("default", StageOptions(precision="int8", backend="auto"))
    log.info("backend: %s (%s)", pipe.backend.name, pipe.backend.reason)
    traces = pipe.loop(source, sink, LoopOptions(target="pt")).run()

The backend is chosen once (:func:`~edge_rt.backends.factory.choose_backend`), the engines are
built by its factory, and the stages receive them: no stage constructs a backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from edge_rt.backends.factory import BACKENDS, BackendChoice, EngineFactory, choose_backend, engine_factory
from edge_rt.backends.threads import limit_blas_threads
from edge_rt.loop.stages import StageOptions, Stages
from edge_rt.pack import BuiltPack

__all__ = ["Pipeline", "StageOptions", "load_stages"]


def load_stages(pack: BuiltPack, options: StageOptions = StageOptions(),
                environment: Callable[[], object | None] | None = None) -> Stages:
    """VAD, ASR, MT, TTS and the end-of-turn model of ``pack`` on the backend ``options.backend`` resolves to here.

    Args:
        environment: returns the TensorRT environment or None (default: detected); for tests.

    Raises:
        BackendUnavailableError: ``backend="tensorrt"`` where it cannot run (names what to install or rebuild).
        PackNotBuiltError: the pack lacks a stage (e.g. built before the turn stage existed); names the rebuild.
    """
    from edge_rt.stages.asr.whisper import Asr, AsrOptions
    from edge_rt.stages.mt.translator import MtOptions, Translator, pairs_into
    from edge_rt.stages.tts.voice import Tts, TtsOptions
    from edge_rt.stages.turn import SmartTurn, TurnModelOptions
    from edge_rt.stages.vad import SileroVad, VadOptions

    if options.backend not in BACKENDS:
        raise ValueError(f"StageOptions.backend must be one of {', '.join(BACKENDS)}, not {options.backend!r}")
    limit_blas_threads()  # numpy's BLAS threads would share the cores with the engines' (backends/threads.py)
    choice = choose_backend(pack, options.backend, environment)
    engines: EngineFactory = engine_factory(pack, choice)
    p, t, target = options.precision, options.threads, options.target
    tts_entry = pack.stage("tts")
    if target not in {*tts_entry.get("voices", {}), *tts_entry.get("formant_voices", {})}:
        target = None  # a language the pack cannot speak: load everything, the loop names what it can do
    pairs = None if target is None else pairs_into(pack, target)
    voices = None if target is None else (target,)
    loads = (
        lambda: SileroVad.from_pack(pack, VadOptions(precision=p), engines=engines),
        lambda: Asr.from_pack(pack, AsrOptions(precision=p, threads=t), engines=engines),
        lambda: Translator.from_pack(pack, MtOptions(precision=p, pairs=pairs), engines=engines),
        lambda: Tts.from_pack(pack, TtsOptions(precision=p, threads=t, voices=voices), engines=engines),
        lambda: SmartTurn.from_pack(pack, TurnModelOptions(precision=p), engines=engines),
    )
    vad, asr, mt, tts, turn = _load_all(loads, concurrently=choice.name == "cpu")
    return Stages(vad, asr, mt, tts, backend=choice, turn=turn)


def _load_all(loads: Sequence[Callable[[], object]], concurrently: bool) -> list:
    """Every stage's ``from_pack``; on the CPU two at a time (ONNX Runtime builds a session without the
    GIL, so one stage's file reads and graph optimisation overlap another's: loading the default pack for
    `run --to pt` took 0.88-1.06 s against 1.08-1.42 s one after the other, page cache warm or dropped,
    2 cores). A TensorRT factory loads one after the other (CUDA contexts are per thread). The first
    stage's error in stage order is raised, as a sequential load would."""
    if not concurrently:
        return [load() for load in loads]
    from concurrent.futures import ThreadPoolExecutor

    from edge_rt.backends.ort import release_freed_heap

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="edge-rt-load") as pool:
        futures = [pool.submit(load) for load in loads]
    release_freed_heap()  # what one thread freed while the other loaded (each session trims as it loads)
    return [f.result() for f in futures]


@dataclass
class Pipeline:
    """A loaded pack with its stages, ready to make loops (one at a time: the stages hold state)."""

    pack: BuiltPack
    stages: Stages

    @classmethod
    def load(cls, pack: str | Path | BuiltPack, options: StageOptions = StageOptions(),
             environment: Callable[[], object | None] | None = None) -> "Pipeline":
        """Load ``pack`` (a name under ``engines/``, a folder, or a loaded pack) and its stages."""
        built = pack if isinstance(pack, BuiltPack) else BuiltPack.load(pack)
        return cls(built, load_stages(built, options, environment))

    @property
    def backend(self) -> BackendChoice:
        return self.stages.backend

    def loop(self, source, sink, options, *, on_caption=None, trace=None, observers: Sequence = ()):
        """A :class:`~edge_rt.loop.loop.Loop` over this pipeline's stages."""
        from edge_rt.loop.loop import Loop

        return Loop(self.stages, source, sink, options, on_caption=on_caption, trace=trace, observers=observers)
