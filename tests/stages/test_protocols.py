"""Stages talk through small protocols and never construct a backend (edge_rt/stages/protocols.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import edge_rt.stages
from edge_rt.stages import protocols

STAGES = Path(edge_rt.stages.__file__).parent
# What constructing a backend looks like: importing a runner, ONNX Runtime, TensorRT or the factory's classes.
FORBIDDEN_MODULES = ("edge_rt.backends.ort", "edge_rt.backends.trt", "onnxruntime", "tensorrt", "cuda")
FORBIDDEN_NAMES = {"OrtEngine", "TrtEngine", "OrtEngines", "TrtEngines", "InferenceSession", "engine_factory"}


def _runtime_imports(tree: ast.Module):
    """Imports outside ``if TYPE_CHECKING:`` blocks, with the names they bring."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                yield node.lineno, node.module, a.name


def backend_constructions(path: Path) -> list[str]:
    """Places in one stage module that construct or import a backend."""
    tree = ast.parse(path.read_text())
    found = []
    for line, module, name in _runtime_imports(tree):
        if module.startswith(FORBIDDEN_MODULES) or name in FORBIDDEN_NAMES:
            found.append(f"{path.name}:{line} imports {module}.{name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if fn in FORBIDDEN_NAMES:
                found.append(f"{path.name}:{node.lineno} calls {fn}()")
    return found


def test_no_stage_module_constructs_a_backend():
    modules = sorted(STAGES.rglob("*.py"))
    assert len(modules) >= 15
    problems = [p for m in modules for p in backend_constructions(m)]
    assert not problems, problems


def test_the_check_catches_a_stage_that_builds_its_own_engine(tmp_path):
    bad = tmp_path / "bad_stage.py"
    bad.write_text("from edge_rt.backends.ort import OrtEngine, SessionOptions\n"
                   "def load(path):\n    return OrtEngine(path, SessionOptions())\n")
    assert len(backend_constructions(bad)) == 3
    ok = tmp_path / "ok_stage.py"
    ok.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                  "    from edge_rt.backends.factory import EngineFactory\n")
    assert backend_constructions(ok) == []


@pytest.mark.slow
def test_loaded_stages_satisfy_the_protocols(tiny_pack):
    from edge_rt.pipeline import StageOptions, load_stages

    stages = load_stages(tiny_pack, StageOptions(backend="cpu"))
    assert isinstance(stages.vad, protocols.Vad)
    assert isinstance(stages.asr, protocols.Asr)
    assert isinstance(stages.mt, protocols.Translator)
    assert isinstance(stages.tts, protocols.Tts)
    assert stages.backend.name == "cpu"
