"""The TensorRT runner on CPU: refusals without a GPU, and its binding/step logic driven through a
fake ``tensorrt`` + ``cuda-python`` that compute with numpy (the real ones need a GPU: `edge-rt selftest`)."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import types

import numpy as np
import pytest

from edge_rt.backends import compat
from edge_rt.backends.compat import TrtEnvironment
from edge_rt.backends.trt import TrtEngine, TrtError
from edge_rt.errors import PackNotBuiltError
from edge_rt.pack import BuiltPack

ENV = TrtEnvironment("10.3.0.30", "Orin (nvgpu)", "8.7", 7620)


class FakeCuda:
    """Device memory as bytearrays keyed by fake addresses; graphs replay the captured context."""

    cudaHostAllocDefault, cudaHostAllocMapped = 0, 2
    cudaMemcpyKind = types.SimpleNamespace(cudaMemcpyHostToDevice=1, cudaMemcpyDeviceToHost=2, cudaMemcpyDeviceToDevice=3)
    cudaStreamCaptureMode = types.SimpleNamespace(cudaStreamCaptureModeThreadLocal=1)

    def __init__(self, fail_capture=False):
        self.mem, self.next, self.log, self.capturing, self.fail_capture = {}, 1 << 40, [], None, fail_capture

    def _at(self, addr):
        for base, buf in self.mem.items():
            if base <= addr < base + len(buf):
                return buf, addr - base
        raise AssertionError(f"bad device address {addr:#x}")

    def read(self, addr, n):
        buf, off = self._at(addr)
        return bytes(buf[off:off + n])

    def write(self, addr, data):
        buf, off = self._at(addr)
        buf[off:off + len(data)] = data

    def cudaGetDeviceProperties(self, i):
        return 0, types.SimpleNamespace(integrated=0, canMapHostMemory=1)

    def cudaMalloc(self, n):
        addr, self.next = self.next, self.next + n + 4096
        self.mem[addr] = bytearray(n)
        return 0, addr

    def cudaFree(self, addr):
        self.mem.pop(addr)
        return (0,)

    def cudaStreamCreate(self):
        return 0, 7

    def cudaStreamDestroy(self, s):
        return (0,)

    def cudaStreamSynchronize(self, s):
        return (0,)

    def cudaMemcpyAsync(self, dst, src, n, kind, stream):
        self.log.append(kind)
        if kind == 1:
            self.write(dst, ctypes.string_at(src, n))
        elif kind == 2:
            ctypes.memmove(dst, self.read(src, n), n)
        else:
            self.write(dst, self.read(src, n))
        return (0,)

    def cudaStreamBeginCapture(self, stream, mode):
        self.capturing = []
        return (0,)

    def cudaStreamEndCapture(self, stream):
        ops, self.capturing = self.capturing, None
        return (0, ops)

    def cudaGraphInstantiate(self, graph, flags):
        return (1, None) if self.fail_capture else (0, graph)

    def cudaGraphLaunch(self, exe, stream):
        self.log.append("graph")
        for op in exe:
            op()
        return (0,)

    def cudaGraphDestroy(self, g):
        return (0,)

    def cudaGraphExecDestroy(self, g):
        return (0,)


class FakeContext:
    """A Silero-like step: output = sum(input) + state[0]; stateN = state + 1 (float32)."""

    def __init__(self, cuda, engine):
        self.cuda, self.engine, self.addr, self.shapes, self.memory = cuda, engine, {}, {}, None

    def set_device_memory(self, ptr, size):
        self.memory = (ptr, size)

    def set_optimization_profile_async(self, i, stream):
        return i < 2

    def set_input_shape(self, name, shape):
        self.shapes[name] = tuple(shape)
        return name != "bad"

    def get_tensor_shape(self, name):
        return {"output": (1, 1), "stateN": (2,)}[name]

    def set_tensor_address(self, name, addr):
        self.addr[name] = addr
        return True

    def _step(self, addr):
        x = np.frombuffer(self.cuda.read(addr["input"], 16), np.float32)
        s = np.frombuffer(self.cuda.read(addr["state"], 8), np.float32)
        self.cuda.write(addr["output"], np.float32([x.sum() + s[0]]).tobytes())
        self.cuda.write(addr["stateN"], (s + 1).astype(np.float32).tobytes())

    def execute_async_v3(self, stream):
        addr = dict(self.addr)  # a graph captures the addresses of its moment
        if self.cuda.capturing is not None:
            self.cuda.capturing.append(lambda: self._step(addr))
        else:
            self.cuda.log.append("exec")
            self._step(addr)
        return True


def _fake_tensorrt(cuda):
    trt = types.ModuleType("tensorrt")
    trt.__version__ = ENV.tensorrt_version
    trt.TensorIOMode = types.SimpleNamespace(INPUT="in", OUTPUT="out")
    trt.ExecutionContextAllocationStrategy = types.SimpleNamespace(USER_MANAGED="user")
    trt.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda self, level: None})
    io = {"input": ("in", "FLOAT"), "state": ("in", "FLOAT"), "output": ("out", "FLOAT"), "stateN": ("out", "FLOAT")}

    class Engine:
        num_io_tensors, num_optimization_profiles = len(io), 1
        get_tensor_name = staticmethod(lambda i: list(io)[i])
        get_tensor_mode = staticmethod(lambda n: io[n][0])
        get_tensor_dtype = staticmethod(lambda n: io[n][1])
        get_device_memory_size_for_profile_v2 = staticmethod(lambda i: 1000)

        def create_execution_context(self, strategy):
            assert strategy == "user"
            return FakeContext(cuda, self)

    trt.Runtime = type("Runtime", (), {"__init__": lambda self, logger: None,
                                       "deserialize_cuda_engine": lambda self, data: Engine()})
    return trt


@pytest.fixture
def fake(monkeypatch, tmp_path):
    def make(fail_capture=False):
        cuda = FakeCuda(fail_capture)
        monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt(cuda))
        monkeypatch.setattr(compat, "current_environment", lambda: ENV)
        monkeypatch.setattr("edge_rt.backends.trt._cudart", lambda: cuda)
        plan = tmp_path / "vad.plan"
        plan.write_bytes(b"plan")
        profiles = [{"input": [[1, 4], [1, 4], [1, 4]], "state": [[2], [2], [2]]}]
        return cuda, TrtEngine(plan, profiles)
    return make


def _buffers():
    return ({"input": np.float32([[1, 2, 3, 4]]), "state": np.float32([0.5, 0])},
            {"output": np.zeros((1, 1), np.float32), "stateN": np.zeros(2, np.float32)})


def test_carried_state_stays_on_the_device_and_the_graph_replays(fake):
    cuda, eng = fake()
    ins, outs = _buffers()
    run = eng.bind(ins, outs, device_resident={"state": "stateN"})
    assert run.use_graph and run.graph_error is None and run.plan.upload == ("input",)
    assert eng.memory_bytes == 1024  # one block for the engine, aligned to 256
    cuda.log.clear()
    got = []
    for _ in range(3):
        run.run()
        got.append(float(outs["output"][0, 0]))
    assert got == [10.5, 11.5, 12.5]  # the state advanced on the device, never uploaded again
    assert cuda.log.count(1) == 3 and cuda.log.count(2) == 3 and cuda.log.count("graph") == 3
    ins["state"][:] = [5, 0]
    run.reset_state()
    run.run()
    assert float(outs["output"][0, 0]) == 15.0
    eng.close()
    assert cuda.mem == {}  # every device buffer and the shared block freed


def test_failed_capture_runs_without_the_graph_and_says_so(fake, caplog):
    cuda, eng = fake(fail_capture=True)
    ins, outs = _buffers()
    run = eng.bind(ins, outs, device_resident={"state": "stateN"})
    assert not run.use_graph and "cudaGraphInstantiate" in run.graph_error
    assert "CUDA graph capture failed" in caplog.text
    run.run()
    run.run()
    assert float(outs["output"][0, 0]) == 11.5 and "exec" in cuda.log


def test_bind_checks_dtypes_shapes_and_names(fake):
    _, eng = fake()
    ins, outs = _buffers()
    with pytest.raises(TrtError, match="'state' is float32 in the engine, the buffer is float64"):
        eng.bind({**ins, "state": np.zeros(2)}, outs)
    with pytest.raises(TrtError, match=r"'stateN' has shape \(2,\)"):
        eng.bind(ins, {**outs, "stateN": np.zeros(3, np.float32)})
    with pytest.raises(TrtError, match="needs host buffers for \\['output'\\]"):
        eng.bind(ins, {"stateN": outs["stateN"]})
    with pytest.raises(TrtError, match="no optimisation profile"):
        eng.bind({**ins, "input": np.zeros((1, 8), np.float32)}, outs)


def test_without_a_gpu_the_runner_refuses_before_tensorrt(tmp_path):
    plan = tmp_path / "x.plan"
    plan.write_bytes(b"\0" * 16)
    if compat.current_environment() is not None:
        pytest.skip("a GPU with TensorRT is present")
    with pytest.raises(TrtError, match="no CUDA GPU.*--backend cpu"):
        TrtEngine(plan, [])
    code = "import sys, edge_rt.backends.trt; print('tensorrt' in sys.modules, 'cuda' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_from_pack_names_a_model_that_fell_back(tmp_path, tiny_pack):
    d = tmp_path / "tiny"
    d.mkdir()
    manifest = json.loads(json.dumps(tiny_pack.manifest))
    manifest["tensorrt"] = {"status": "built", **ENV.as_dict(), "engines": {"mt/en-pt/decoder": {
        "backend": "onnxruntime", "file": None,
        "fallbacks": [{"from": "fp16", "to": "onnxruntime", "reason": "ParserError: unsupported op"}]}}}
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PackNotBuiltError, match="runs on ONNX Runtime.*ParserError: unsupported op"):
        TrtEngine.from_pack(BuiltPack.load(d), "mt", "en-pt/decoder", here=ENV)
