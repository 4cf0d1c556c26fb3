"""Config: one TOML file validated in one pass; every error names the key and the allowed values."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from edge_rt.config import Config, ConfigError, load_config

EXAMPLE = Path(__file__).resolve().parents[1] / "systemd" / "config.example.toml"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_example_config_is_valid(tmp_path):
    data = tomllib.loads(EXAMPLE.read_text())
    data["record"]["dir"] = str(tmp_path / "sessions")  # /var/lib/edge-rt exists only on a device
    c = Config.from_dict(data)
    assert c.translate.to == "pt" and c.translate.source == "en"
    assert c.metrics.bind == "127.0.0.1"


def test_defaults_without_sections(tmp_path):
    c = load_config(_write(tmp_path, ""))
    assert c == Config(path=c.path)
    assert c.translate.source is None and c.metrics.bind == "127.0.0.1"


def test_malformed_toml_names_the_file_and_line(tmp_path):
    p = _write(tmp_path, '[audio]\ndevice_in = "USB\n')
    with pytest.raises(ConfigError, match=r"not valid TOML.*line 2"):
        load_config(p)


def test_missing_file_says_where_the_example_is(tmp_path):
    with pytest.raises(ConfigError, match="config.example.toml"):
        load_config(tmp_path / "nope.toml")


def test_unknown_keys_suggest_the_right_one(tmp_path):
    p = _write(tmp_path, '[audio]\ndevice_inn = "USB"\n[translat]\nto = "pt"\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "unknown key 'audio.device_inn'; did you mean 'audio.device_in'?" in msg
    assert "unknown key 'translat'; did you mean 'translate'?" in msg


def test_bad_values_name_key_and_allowed_values(tmp_path):
    p = _write(tmp_path, '[pack]\nprecision = "fp16"\n[audio]\nrate_in = 12\n[translate]\nto = "Portuguese"\n'
                         '[loop]\nhangover_ms = "300"\n[metrics]\nbind = "localhost"\nport = 99999\n'
                         '[record]\ndir = "sessions"\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "pack.precision = 'fp16': allowed values: 'fp32', 'int8'" in msg
    assert "audio.rate_in = 12" in msg and "48000" in msg
    assert "translate.to = 'Portuguese'" in msg
    assert "loop.hangover_ms must be an integer" in msg
    assert "metrics.bind = 'localhost'" in msg and "metrics.port = 99999" in msg
    assert "record.dir = 'sessions': must be an absolute path" in msg


def test_record_dir_must_be_creatable(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match="record.dir .* not a directory"):
        Config.from_dict({"record": {"dir": str(f)}})
    with pytest.raises(ConfigError, match="NUL"):
        Config.from_dict({"record": {"dir": "/tmp/a\0b"}})
    assert Config.from_dict({"record": {"dir": str(tmp_path / "new" / "deeper")}}).record.dir


def test_cli_flags_override_and_are_validated(tmp_path):
    c = load_config(_write(tmp_path, '[translate]\nto = "pt"\nfrom = "en"\n'))
    o = c.override(translate__to="en", translate__from="pt", audio__device_in=None)
    assert (o.translate.to, o.translate.source, o.audio.device_in) == ("en", "pt", "")
    with pytest.raises(ConfigError, match="pack.precision"):
        c.override(pack__precision="fp8")
