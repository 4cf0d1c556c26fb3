"""The service's one TOML file, validated into frozen dataclasses in one pass.

Every section is a frozen dataclass with a comment per field; :func:`load_config`
parses the file and :meth:`Config.from_dict` checks every key at once, so the
operator sees all mistakes together, each naming the key (``audio.rate_in``)
and the values it allows. Unknown keys are errors with a did-you-mean. CLI flags
override the file through :meth:`Config.override`.

Example: ``systemd/config.example.toml``.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_rt.errors import EdgeRtError
from edge_rt.loop.preroll import NoisyPrerollOptions, SoundStartOptions
from edge_rt.loop.redecode import RedecodeOptions
from edge_rt.loop.split import SplitOptions
from edge_rt.loop.turn_policy import TurnOptions

__all__ = ["Config", "ConfigError", "load_config", "DEFAULT_CONFIG_PATH"]

DEFAULT_CONFIG_PATH = Path("/etc/edge-rt/config.toml")
BACKENDS = ("sounddevice", "pyaudio")  # audio libraries
ENGINE_BACKENDS = ("cpu", "tensorrt", "auto")  # what runs the engines (edge_rt/backends/factory.py BACKENDS)
PRECISIONS = ("fp32", "int8")
COMMON_RATES = (8000, 16000, 22050, 32000, 44100, 48000, 96000)
LANG_AUTO = ("", "auto")


class ConfigError(EdgeRtError, ValueError):
    """The config file is malformed or holds bad values; the message names each key."""


@dataclass(frozen=True)
class PackConfig:
    name: str = "default"  # built pack under $EDGE_RT_ENGINES (or engines/), or an absolute folder
    precision: str = "fp32"  # "fp32" | "int8" (int8 falls back to fp32 per model)
    threads: int = 2  # ONNX Runtime intra-op threads per engine


@dataclass(frozen=True)
class EngineConfig:
    # What runs the engines: "auto" = TensorRT where the pack has engines built for this TensorRT and
    # GPU, else the CPU (the log says which and why); "tensorrt" refuses to start without them.
    backend: str = "auto"  # "cpu" | "tensorrt" | "auto"


@dataclass(frozen=True)
class AudioConfig:
    backend: str = "sounddevice"  # "sounddevice" | "pyaudio"
    device_in: str = ""  # capture device: index or part of its name; "" = first input device
    device_out: str = ""  # playback device: index or part of its name; "" = first output device
    rate_in: int = 0  # Hz; 0 = the device's default rate
    rate_out: int = 0  # Hz; 0 = the device's default rate
    stall_s: float = 3.0  # no capture audio for this long = the device is lost; reopen it


@dataclass(frozen=True)
class TranslateConfig:
    to: str = "en"  # language to speak
    from_: str = ""  # language heard ("from" in TOML); "" or "auto" = detect per utterance

    @property
    def source(self) -> str | None:
        return None if self.from_ in LANG_AUTO else self.from_


@dataclass(frozen=True)
class LoopConfig:
    hangover_ms: int = 288  # silence that ends an utterance
    # The pause after which a sentence the turn policy judges complete ends (TurnOptions.complete_after_ms):
    # about the time the speculation at a pause takes on this device; lower it where that is shorter (a GPU).
    complete_after_ms: int = TurnOptions.complete_after_ms
    # An utterance whose greedy decode averages a log-probability below this is decoded again with a beam of 5
    # (LoopOptions.redecode); 0 = greedy only.
    redecode_below: float = RedecodeOptions.below_logprob
    # An utterance whose transcript has fewer text tokens than this per second is decoded again in pieces
    # (LoopOptions.split); 0 = never.
    split_below: float = SplitOptions.below_tokens_per_s
    # An utterance whose opening speech stands less than this many dB over the second before it starts further
    # back (LoopOptions.noisy_preroll); 0 = never.
    noisy_preroll_below: float = NoisyPrerollOptions.below_db
    # Out of a quiet room, an utterance whose pre-roll starts inside a sound this many dB over the room's floor starts
    # where the sound does (LoopOptions.sound_start); 0 = never.
    sound_start_above: float = SoundStartOptions.above_db
    # A run of this many words or more that Whisper wrote twice in a row is said once (LoopOptions.repeat_words);
    # 0 = say what Whisper wrote.
    repeat_words: int = 3
    # An utterance the unsure gate dropped is lent to one that starts within this many seconds after it
    # (ContextOptions.lend_within_s); 0 = never.
    lend_within_s: float = 2.0
    latency_budget_ms: int = 1500  # end of speech → first output; a miss triggers a flight-recorder dump


@dataclass(frozen=True)
class RecordConfig:
    dir: str = ""  # absolute folder for sessions and flight-recorder dumps; "" = record nothing
    audio: bool = True  # keep the whole session's input/output audio (else only transcripts, trace, dumps)
    flight_s: float = 30.0  # seconds of audio in a flight-recorder dump (at most 60)
    max_dumps: int = 50  # flight-recorder dumps per session (protects the disk)


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 0  # Prometheus port; 0 = off
    bind: str = "127.0.0.1"  # address to listen on (the unit only allows localhost)


@dataclass(frozen=True)
class Config:
    pack: PackConfig = field(default_factory=PackConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    translate: TranslateConfig = field(default_factory=TranslateConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    path: str = ""  # the file it was read from ("" = defaults)

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: str = "") -> "Config":
        """Validate a parsed TOML table; raises :class:`ConfigError` listing every problem."""
        errors: list[str] = []
        sections: dict[str, Any] = {}
        _unknown(data, _SECTIONS, "", errors)
        for name, klass in _SECTIONS.items():
            table = data.get(name, {})
            if not isinstance(table, dict):
                errors.append(f"[{name}] must be a table (a `[{name}]` section), got {type(table).__name__}")
                table = {}
            sections[name] = _section(name, klass, table, errors)
        if errors:
            where = f"{path}: " if path else ""
            raise ConfigError(f"{where}invalid config:\n  - " + "\n  - ".join(errors))
        return cls(**sections, path=path)

    def override(self, **dotted: Any) -> "Config":
        """A copy with ``section__key=value`` overrides (None = keep), validated like the file."""
        data = self.as_dict()
        for key, value in dotted.items():
            if value is None:
                continue
            section, name = key.split("__", 1)
            data[section][name] = value
        return Config.from_dict(data, self.path)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """The TOML-shaped dict (``translate.from`` spelled as in the file)."""
        out = {}
        for name in _SECTIONS:
            d = dataclasses.asdict(getattr(self, name))
            out[name] = {_toml_key(k): v for k, v in d.items()}
        return out


_SECTIONS: dict[str, type] = {
    "pack": PackConfig,
    "engine": EngineConfig,
    "audio": AudioConfig,
    "translate": TranslateConfig,
    "loop": LoopConfig,
    "record": RecordConfig,
    "metrics": MetricsConfig,
}


def _toml_key(attr: str) -> str:
    return "from" if attr == "from_" else attr


def _unknown(table: dict, allowed, prefix: str, errors: list[str]) -> None:
    for key in table:
        if key in allowed:
            continue
        close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
        hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; allowed: {', '.join(allowed)}"
        errors.append(f"unknown key '{prefix}{key}'{hint}")


def _section(name: str, klass: type, table: dict, errors: list[str]):
    fields = {_toml_key(f.name): f for f in dataclasses.fields(klass)}
    _unknown(table, fields, f"{name}.", errors)
    values = {}
    for key, f in fields.items():
        if key not in table:
            continue
        value = table[key]
        err = _check(f"{name}.{key}", value, f.type, errors)
        if err is None:
            values[f.name] = float(value) if f.type == "float" else value
    for key, check in _RULES.get(name, {}).items():
        if key in table and _toml_key(key) in fields and (problem := check(values.get(_attr(key)))):
            errors.append(f"{name}.{key} = {table[key]!r}: {problem}")
    return klass(**values)


def _attr(key: str) -> str:
    return "from_" if key == "from" else key


def _check(key: str, value: Any, typ: str, errors: list[str]) -> str | None:
    kinds = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}[typ]
    if isinstance(value, bool) and typ != "bool" or not isinstance(value, kinds):
        msg = f"{key} must be {'a string' if typ == 'str' else 'an integer' if typ == 'int' else 'a number' if typ == 'float' else 'true or false'}, got {value!r}"
        errors.append(msg)
        return msg
    return None


# -- value rules: each returns a problem (naming the allowed values) or None ----
def _one_of(allowed):
    return lambda v: None if v is None or v in allowed else f"allowed values: {', '.join(map(repr, allowed))}"


def _int_range(lo, hi, unit=""):
    return lambda v: None if v is None or lo <= v <= hi else f"must be between {lo} and {hi}{unit}"


def _rate(v):
    if v is None or v == 0 or 8000 <= v <= 192000:
        return None
    return f"must be 0 (the device's default) or a rate in Hz such as {', '.join(map(str, COMMON_RATES))}"


def _lang(allow_auto: bool):
    def check(v):
        if v is None or (allow_auto and v in LANG_AUTO):
            return None
        if v.isascii() and v.isalpha() and v.islower() and 2 <= len(v) <= 3:
            return None
        auto = ' or "auto" (detect)' if allow_auto else ""
        return f"must be a lower-case ISO 639-1 code such as 'en', 'pt'{auto}"
    return check


def _device(v):
    if v is None or "\0" not in v:
        return None
    return "must not contain NUL; use an index or part of the name shown by `edge-rt devices`"


def _pack_name(v):
    if v is None:
        return None
    if not v or "\0" in v:
        return "must be a built pack's name (e.g. 'default') or its absolute folder"
    if os.sep in v and not os.path.isabs(v):
        return "a pack folder must be an absolute path"
    return None


def _bind(v):
    if v is None:
        return None
    try:
        ipaddress.ip_address(v)
    except ValueError:
        return "must be an IP address such as 127.0.0.1 or ::1 (the service may only listen on localhost)"
    return None


def check_dir(v: str | None) -> str | None:
    """A usable recording folder: '' (off), or absolute, NUL-free, existing or creatable."""
    if not v:
        return None
    if "\0" in v:
        return "must not contain NUL"
    p = Path(v)
    if not p.is_absolute():
        return "must be an absolute path (the service's working directory is not yours), e.g. /var/lib/edge-rt/sessions"
    try:
        return _probe_dir(p)
    except (OSError, ValueError) as e:  # a name too long, a surrogate the file system cannot encode
        return f"cannot be used as a folder ({e.__class__.__name__}: {str(e)[:200]})"


def _probe_dir(p: Path) -> str | None:
    if p.exists():
        if not p.is_dir():
            return "exists and is not a directory"
        if not os.access(p, os.W_OK | os.X_OK):
            return "is not writable by this user (chown it to the service user)"
        return None
    parent = next((a for a in p.parents if a.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"does not exist and cannot be created ({parent} is not a writable directory)"
    return None


_RULES = {
    "pack": {"name": _pack_name, "precision": _one_of(PRECISIONS), "threads": _int_range(1, 64)},
    "engine": {"backend": _one_of(ENGINE_BACKENDS)},
    "audio": {"backend": _one_of(BACKENDS), "device_in": _device, "device_out": _device, "rate_in": _rate,
              "rate_out": _rate, "stall_s": lambda v: None if v is None or 0.5 <= v <= 60 else "must be between 0.5 and 60 s"},
    "translate": {"to": _lang(False), "from": _lang(True)},
    "loop": {"hangover_ms": _int_range(32, 5000, " ms"), "latency_budget_ms": _int_range(100, 60000, " ms"),
             "complete_after_ms": _int_range(0, TurnOptions.max_pause_ms - 1, " ms"),
             "redecode_below": lambda v: None if v is None or -5 <= v <= 0 else "must be between -5 and 0 (0: off)",
             "split_below": lambda v: None if v is None or 0 <= v <= 20 else "must be between 0 and 20 (0: off)",
             "noisy_preroll_below": lambda v: None if v is None or 0 <= v <= 60 else "must be between 0 and 60 dB (0: off)",
             "sound_start_above": lambda v: (None if v is None or 0 <= v <= 60
                                             else "must be between 0 and 60 dB (0: off)"),
             "repeat_words": _int_range(0, 50, " words (0: off)"),
             "lend_within_s": lambda v: None if v is None or 0 <= v <= 5 else "must be between 0 and 5 s (0: off)"},
    "record": {"dir": check_dir, "flight_s": lambda v: None if v is None or 1 <= v <= 60 else "must be between 1 and 60 s",
               "max_dumps": _int_range(0, 10000)},
    "metrics": {"port": _int_range(0, 65535), "bind": _bind},
}


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist; copy systemd/config.example.toml there and edit it")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p} is not valid TOML: {e}; fix the syntax (see systemd/config.example.toml)") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {p}: {e}") from e
    return Config.from_dict(data, str(p))
