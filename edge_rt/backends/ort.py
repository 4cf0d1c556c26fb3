"""ONNX Runtime backend (CPU)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from edge_rt.errors import PackNotBuiltError


@dataclass(frozen=True)
class SessionOptions:
    """How an ONNX Runtime session is created."""

    intra_op_threads: int = 2  # the target boards and CI have 2 fast cores to spare
    inter_op_threads: int = 1
    graph_optimization: str = "all"  # "basic" | "extended" | "all"
    # MLAS pre-packs constant MatMul/Gemm weights into its own layout (the file's copy is freed unless another
    # node reads it). Off: -101 MB on the FP32 Whisper base decoder, whose tied embedding is both gathered and
    # packed for the logits Gemm, at +7 % CPU on a transcription here (edge_rt.backends.factory.ORT_TUNING): on.
    prepack: bool = True
    # "shared": one ONNX Runtime arena for every session of the process (an allocator registered with the
    # environment, `session.use_env_allocators`): the loop runs its engines one after another on one worker
    # thread, so the encoder's 20/30-s windows and Piper's long sentences reuse the same blocks instead of each
    # session keeping its own high-water mark. The loop's peak after warm-up, default pack into pt, bench's 7
    # memory clips, in-process, one run each on an idle machine (2026-12-03): greedy 461 -> 429 MB, beam 5
    # 573 -> 536 MB (ONNX Runtime's arena extending by powers of two; extending by the request was 473 MB).
    # "session": an arena per session, which keeps each session's activation high-water mark;
    # "off": malloc/free per tensor. Off left Piper at 189 MB after a run (341 MB with the arena) but its peak
    # rose to 426 MB (heap fragmentation) and runs were several times slower here.
    memory_arena: str = "shared"
    mem_pattern: bool = True  # one planned block per input shape; off (with the arena off) raised peaks 20-80 MB
    # When the intra-op pool's threads spin instead of sleeping. "run" (default since 2026-12-07, twenty-ninth
    # session): they spin while a run of this session lasts, so its many short ops hand work on at once, and stop
    # when the run returns (`session.force_spinning_stop`), so they do not keep a core while the loop's one worker
    # runs the next session. "always" (ONNX Runtime's default; every session before 2026-12-07): they go on
    # spinning after a run, and took the cores from the next session: on the 2-core x86 here a Smart Turn call took
    # 27 ms alone and 46-49 ms right after a Whisper decode. "off": they sleep between ops as well (each
    # parallel op wakes them). What a pause costs the loop (Whisper, then the turn model, Marian and the first TTS
    # clause, on 3 generated 6-s utterances, not the eval clips; default pack INT8, 2 threads, 2-core Xeon with
    # AVX-VNNI, medians of 27 per setting, the settings in turn, each in its own process: `python
    # tools/spin_ab.py`): every session "always" 215 ms (Whisper 158, turn 46), the Whisper decoder "always" and the
    # rest "off" (2026-12-07, twenty-eighth session) 162 ms (Whisper 111, turn 36), every session "off" 200 ms
    # (Whisper 157: its decoder waking its threads at every step), every session "run" 147 ms (Whisper 106, turn
    # 26); Piper's whole English speech of the same text 259 / 203 / 202 / 185 ms. (ONNX Runtime's process-wide
    # pool was faster than the decoder alone spinning, but once it exists every session in the process must join
    # it, and the peer stack's Piper and faster-whisper's VAD make their own: not taken.)
    spinning: str = "run"


_ARENAS = ("shared", "session", "off")
_SPINNING = ("run", "always", "off")
_OPT_LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


class OrtEngine:
    """An ONNX model in an ONNX Runtime CPU session.

    Args:
        path: the ``.onnx`` file.
        options: thread counts, optimisation level, memory knobs.
        initializers: arrays that replace the model's initializers of the same names
            (``SessionOptions.add_initializer``): ONNX Runtime computes on them in place, without a copy,
            so one array handed to several sessions is held once (see
            :class:`SharedInitializers`). The engine keeps a reference: they live as long as it does.
    """

    def __init__(self, path: str | Path, options: SessionOptions = SessionOptions(),
                 initializers: Mapping[str, np.ndarray] | None = None):
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise PackNotBuiltError(
                f"engine file {path} does not exist; build the pack with "
                f"`python tools/build_engines.py --pack <name>`"
            )
        so = ort.SessionOptions()
        so.intra_op_num_threads = options.intra_op_threads
        so.inter_op_num_threads = options.inter_op_threads
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[options.graph_optimization])
        so.log_severity_level = 3
        if options.memory_arena not in _ARENAS:
            raise ValueError(f"SessionOptions.memory_arena must be one of {_ARENAS}, not {options.memory_arena!r}")
        so.enable_cpu_mem_arena = options.memory_arena != "off"
        if options.memory_arena == "shared" and _register_shared_arena():
            so.add_session_config_entry("session.use_env_allocators", "1")
        so.enable_mem_pattern = options.mem_pattern
        if options.spinning not in _SPINNING:
            raise ValueError(f"SessionOptions.spinning must be one of {_SPINNING}, not {options.spinning!r}")
        so.add_session_config_entry("session.intra_op.allow_spinning", "0" if options.spinning == "off" else "1")
        if options.spinning == "run":
            so.add_session_config_entry("session.force_spinning_stop", "1")
        if not options.prepack:
            so.add_session_config_entry("session.disable_prepacking", "1")
        self._initializers = {}  # name -> (array, OrtValue): both must outlive the session
        for name, arr in (initializers or {}).items():
            _check_buffer(name, arr)
            value = ort.OrtValue.ortvalue_from_numpy(arr)
            so.add_initializer(name, value)
            self._initializers[name] = (arr, value)
        try:
            self._session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own Fail/InvalidGraph types
            raise PackNotBuiltError(
                f"engine file {path} could not be loaded ({type(e).__name__}: {e}); it is corrupt or "
                f"truncated: rebuild the pack with `python tools/build_engines.py --pack <name> --force`"
            ) from e
        release_freed_heap()
        self.path = path
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._outputs = [o.name for o in self._session.get_outputs()]

    @property
    def shared_initializers(self) -> tuple[str, ...]:
        """Names of the initializers this session reads from arrays handed in (not from its file)."""
        return tuple(self._initializers)

    @property
    def input_names(self) -> list[str]:
        return self._inputs

    @property
    def output_names(self) -> list[str]:
        return self._outputs

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self._session.run(self._outputs, dict(inputs))
        return dict(zip(self._outputs, outs))

    def bind(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray | None], *,
             device_resident: Mapping[str, str] | None = None,
             host_outputs: Sequence[str] | None = None) -> "OrtBoundRun":
        """IOBinding over preallocated host buffers: each run reads ``inputs`` and writes ``outputs`` in place.

        The arrays must stay alive and keep their shapes; change their contents, not the objects.
        Names not given are an error, so nothing is silently allocated per call.

        An output given as ``None`` has a data-dependent shape (Piper's waveform): ONNX Runtime
        cannot write it into a preallocated buffer, so it allocates it on every run, and
        :meth:`OrtBoundRun.output` returns it. (A TensorRT runner needs an output allocator for
        such an output, and that engine cannot be captured in a CUDA graph.)

        Args:
            device_resident: ``{state_input: state_output}``; after every run the output is copied
                into the input's buffer (``np.copyto``, in place), and :meth:`OrtBoundRun.reset_state`
                zeroes those inputs. Each pair must have the same shape and dtype.
            host_outputs: the outputs the caller reads; on the CPU every output is on the host
                already, so this is only checked (every name must be an output).
        """
        missing = [n for n in self._inputs if n not in inputs] + [n for n in self._outputs if n not in outputs]
        if missing:
            raise ValueError(f"{self.path.name}: bind() needs buffers for {missing}")
        carried = _carry_pairs(self.path.name, inputs, outputs, device_resident or {})
        unknown = [n for n in (host_outputs or ()) if n not in outputs]
        if unknown:
            raise ValueError(f"{self.path.name}: host_outputs {unknown} are not outputs; outputs: {list(outputs)}")
        io = self._session.io_binding()
        for name, arr in inputs.items():
            _check_buffer(name, arr)
            io.bind_cpu_input(name, arr)
        for name, arr in outputs.items():
            if arr is None:  # data-dependent shape: ONNX Runtime allocates it per run
                io.bind_output(name, "cpu")
                continue
            _check_buffer(name, arr)
            io.bind_output(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        return OrtBoundRun(self._session, io, (inputs, outputs), carried, tuple(outputs))


@functools.lru_cache(maxsize=1)
def _register_shared_arena() -> bool:
    """Register one CPU arena allocator with ONNX Runtime's environment, once per process (SessionOptions.memory_arena).

    False where it cannot be registered (then each session keeps its own arena, as with "session").
    """
    import onnxruntime as ort

    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    try:
        ort.create_and_register_allocator(info, ort.OrtArenaCfg({"max_mem": 0, "arena_extend_strategy": 0}))
    except Exception as e:  # onnxruntime raises its own types; e.g. one registered already by the host program
        if "already" not in str(e).lower():
            return False
    return True


def release_freed_heap() -> None:
    """Give the heap pages freed while a session loaded back to the OS (glibc's ``malloc_trim``).

    ONNX Runtime reads the whole ``.onnx`` file into the heap to parse it and frees it once the
    session holds its weights; glibc keeps those pages (its mmap threshold has grown past them),
    so every model loaded left its file size behind in RSS until something reused it: 30-35 MB per
    Marian graph here. Elsewhere (musl, macOS) there is nothing to call and nothing is done.
    """
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.lru_cache(maxsize=1)
def _libc():
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):  # not glibc
        return None


class SharedInitializers:
    """Large initializers that several ONNX files hold byte for byte, read once and handed to every session.

    Marian's students tie their embedding matrix (``Wemb``, 32000 x 256 float32, 31 MB): the pair's encoder
    and decoder graphs each store it. Loading both lets ONNX Runtime hold it twice; with one array given to
    both sessions (:class:`OrtEngine` ``initializers``) it is held once. A tensor is shared only when its
    name, dtype, shape and every byte agree with one held already; otherwise it is held on its own.
    """

    def __init__(self):
        self._held: dict[tuple, list[np.ndarray]] = {}

    def arrays(self, path: str | Path, names: Sequence[str]) -> dict[str, np.ndarray]:
        """The initializers ``names`` of ``path`` (those stored inline), each the held copy when one matches."""
        from edge_rt.backends.onnx_file import find_initializers, read_initializer

        out = {}
        for name, loc in find_initializers(path, names).items():
            data = read_initializer(path, loc)
            held = self._held.setdefault((name, loc.dtype.str, loc.shape), [])
            out[name] = next((h for h in held if np.array_equal(h, data)), None)
            if out[name] is None:
                held.append(data)
                out[name] = data
        return out

    @property
    def nbytes(self) -> int:
        """Bytes held (each array once)."""
        return sum(a.nbytes for arrs in self._held.values() for a in arrs)


def _carry_pairs(model: str, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray],
                 device_resident: Mapping[str, str]) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """(input buffer, output buffer) of each ``device_resident`` pair, checked."""
    pairs = []
    for src, dst in device_resident.items():
        if src not in inputs or outputs.get(dst) is None:
            raise ValueError(f"{model}: device_resident maps input {src!r} to output {dst!r}, but "
                             f"inputs are {list(inputs)} and outputs {list(outputs)}")
        state, nxt = inputs[src], outputs[dst]
        if state.shape != nxt.shape or state.dtype != nxt.dtype:
            raise ValueError(f"{model}: device_resident {src!r} is {state.dtype}{list(state.shape)} but output "
                             f"{dst!r} is {nxt.dtype}{list(nxt.shape)}; a carried state needs the same shape and dtype")
        if np.may_share_memory(state, nxt):
            raise ValueError(f"{model}: device_resident {src!r} and {dst!r} share memory; bind separate buffers "
                             f"(the graph would read the state while writing its next value)")
        pairs.append((state, nxt))
    return tuple(pairs)


def _check_buffer(name: str, arr: np.ndarray) -> None:
    if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
        raise ValueError(f"buffer {name!r} must be a C-contiguous numpy array")


class OrtBoundRun:
    """One bound step; keeps the buffers alive as long as it lives."""

    def __init__(self, session, binding, keep, carried: tuple[tuple[np.ndarray, np.ndarray], ...] = (),
                 order: tuple[str, ...] = ()):
        self._session, self._binding, self._keep, self._carried = session, binding, keep, carried
        self._run_options = None  # ONNX Runtime RunOptions of run_unless (made on its first call, then reused)
        self._order = order  # output names in binding order (the order of binding.get_outputs())
        # ONNX Runtime keeps the value it allocated bound, and the next run with another shape
        # fails: data-dependent outputs are bound afresh before every run.
        self._dynamic = tuple(n for n in order if keep[1][n] is None)

    def run(self) -> None:
        self._bind_dynamic()
        self._session.run_with_iobinding(self._binding)
        self._carry()

    def _bind_dynamic(self) -> None:
        for name in self._dynamic:
            self._binding.bind_output(name, "cpu")

    def _carry(self) -> None:
        for state, nxt in self._carried:
            np.copyto(state, nxt)

    def run_unless(self, stop: Callable[[], bool]) -> bool:
        """Run, unless ``stop()`` says True before or during the run; True if the run completed.

        During the run ``stop`` is asked from a helper thread every few ms (:mod:`interrupt`), which
        sets ONNX Runtime's ``RunOptions.terminate``: an interrupted run's outputs are undefined, and
        carried state is left as it was. Any other failure of the run raises as :meth:`run` does.
        """
        if stop():
            return False
        from edge_rt.backends.interrupt import watcher

        if self._run_options is None:
            import onnxruntime as ort

            self._run_options = ort.RunOptions()
        ro = self._run_options
        self._bind_dynamic()
        with watcher().watching(ro, stop):
            try:
                self._session.run_with_iobinding(self._binding, ro)
            except Exception:  # ONNX Runtime's Fail "Exiting due to terminate flag being set to true", or not
                if not ro.terminate:  # (read before leaving the block, which clears it)
                    raise
                return False
        self._carry()
        return True

    def reset_state(self) -> None:
        """Zero every ``device_resident`` input (a new stream or utterance starts)."""
        for state, _ in self._carried:
            state.fill(0)

    def output(self, name: str) -> np.ndarray:
        """The last run's value of an output bound as ``None`` (data-dependent shape): a new array.

        Outputs bound to a buffer are read from that buffer instead.
        """
        if name not in self._order or self._keep[1][name] is not None:
            raise ValueError(f"output({name!r}): only outputs bound as None (data-dependent) are fetched; "
                             f"those are {[n for n in self._order if self._keep[1][n] is None]}")
        return self._binding.get_outputs()[self._order.index(name)].numpy()
