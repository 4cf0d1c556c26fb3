"""Engine backends: ONNX Runtime here; TensorRT arrives lazily behind a GPU check."""

from edge_rt.backends.base import Engine
from edge_rt.backends.ort import OrtEngine, SessionOptions

__all__ = ["Engine", "OrtEngine", "SessionOptions"]
