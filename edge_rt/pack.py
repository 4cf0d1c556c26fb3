"""A built model pack on disk: ``engines/<pack>/manifest.json`` and the files it names.

The runtime only ever reads built packs; ``tools/build_engines.py`` writes them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_rt.errors import PackNotBuiltError

MANIFEST = "manifest.json"
STAGES = ("vad", "asr", "mt", "tts", "turn")
PRECISIONS = ("int8", "fp32")


def repo_root() -> Path:
    """The checkout that holds ``engines/`` (the package lives one level below it)."""
    return Path(__file__).resolve().parents[1]


def engines_dir() -> Path:
    """Where built packs live: ``$EDGE_RT_ENGINES`` or ``<repo>/engines``."""
    env = os.environ.get("EDGE_RT_ENGINES")
    return Path(env) if env else repo_root() / "engines"


def build_command(name: str) -> str:
    return f"python tools/build_engines.py --pack {name}"


@dataclass(frozen=True)
class BuiltPack:
    """A parsed manifest plus the directory it lives in."""

    name: str
    dir: Path
    manifest: dict[str, Any]

    @classmethod
    def load(cls, name_or_dir: str | Path) -> "BuiltPack":
        """Load by pack name (under :func:`engines_dir`) or by directory path."""
        p = Path(name_or_dir)
        pack_dir = p if (p.is_dir() or os.sep in str(name_or_dir)) else engines_dir() / str(name_or_dir)
        name = pack_dir.name
        mf = pack_dir / MANIFEST
        if not mf.is_file():
            raise PackNotBuiltError(
                f"model pack '{name}' is not built ({mf} is missing); build it with `{build_command(name)}`"
            )
        try:
            manifest = json.loads(mf.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise PackNotBuiltError(
                f"the manifest {mf} is unreadable ({e}); rebuild with `{build_command(name)} --force`"
            ) from e
        return cls(name=manifest.get("pack", name), dir=pack_dir, manifest=manifest)

    def stage(self, stage: str) -> dict[str, Any]:
        """The manifest entry of one stage (``vad``, ``asr``, ``mt``, ``tts``)."""
        try:
            return self.manifest["stages"][stage]
        except KeyError:
            raise PackNotBuiltError(
                f"model pack '{self.name}' has no '{stage}' stage; rebuild it with `{build_command(self.name)}`"
            ) from None

    def file(self, stage: str, relpath: str) -> Path:
        """A file of the pack by its manifest-relative path; raises if missing."""
        path = self.dir / relpath
        if not path.exists():
            raise PackNotBuiltError(
                f"model pack '{self.name}' is incomplete: {path} ({stage}) is missing; "
                f"rebuild it with `{build_command(self.name)} --force`"
            )
        return path

    def model(self, stage: str, model: str, precision: str = "fp32") -> Path:
        """Path of one ONNX model of a stage in the requested precision.

        Falls back to FP32 when the pack has no INT8 twin of that model
        (the manifest records why, see ``build_report.md``).
        """
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
        entry = self.stage(stage)
        # "parts": graphs the build derived from a model (Piper's prior and vocoder), FP32 only
        models = {**entry.get("parts", {}), **entry["models"]}
        if model not in models:
            raise PackNotBuiltError(
                f"model pack '{self.name}' has no model '{model}' for stage '{stage}'; "
                f"rebuild it with `{build_command(self.name)} --force`"
            )
        entry = models[model]
        rel = entry.get(precision) or entry["fp32"]
        return self.file(stage, rel)

    def asset(self, stage: str, name: str) -> Path:
        """A non-model file of a stage (tokenizer, config, vocabulary, ...)."""
        assets = self.stage(stage).get("assets", {})
        if name not in assets:
            raise PackNotBuiltError(
                f"model pack '{self.name}' has no asset '{name}' for stage '{stage}'; "
                f"rebuild it with `{build_command(self.name)} --force`"
            )
        return self.file(stage, assets[name])

    def tensorrt_engine(self, stage: str, model: str, here=None) -> Path:
        """The TensorRT engine of one model, after checking it was built for this TensorRT and GPU.

        Args:
            here: the current :class:`~edge_rt.backends.compat.TrtEnvironment` (default: detected; a GPU is
                looked for before TensorRT is imported).

        Raises:
            PackNotBuiltError: the pack has no TensorRT engines (the build skipped them; the manifest says why).
            EngineCompatibilityError: they were built for another TensorRT version or GPU (names the rebuild command).
        """
        from edge_rt.backends.compat import TrtEnvironment, check, current_environment

        section = self.manifest.get("tensorrt", {})
        if section.get("status") != "built":
            raise PackNotBuiltError(
                f"model pack '{self.name}' has no TensorRT engines ({section.get('reason', 'not built')}); build them "
                f"on the device with `{build_command(self.name)}`"
            )
        check(TrtEnvironment.from_dict(section), current_environment() if here is None else here, self.name)
        engines = section.get("engines", {})
        key = f"{stage}/{model}"
        if key not in engines:
            raise PackNotBuiltError(f"model pack '{self.name}' has no TensorRT engine for {key}; rebuild it with "
                                    f"`{build_command(self.name)} --force`")
        return self.file(stage, engines[key]["file"])
