"""Security: metrics on loopback unless configured, validated paths, no shell with strings we build.

The systemd unit's `systemd-analyze security` exposure (<= 3.0) is checked by tests/systemd/test_unit.py.
"""

from __future__ import annotations

import ast
import socket
import urllib.request
from pathlib import Path

import pytest

from edge_rt.config import Config, ConfigError, MetricsConfig

REPO = Path(__file__).resolve().parents[1]
SHELL_CALLS = {("os", "system"), ("os", "popen"), ("os", "execl"), ("os", "execlp"), ("os", "spawnl"),
               ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"), ("pty", "spawn")}
SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output"}


def shell_uses(source: str, filename: str = "<src>") -> list[str]:
    """Calls that hand a string to a shell: shell=True, os.system/popen & co., or a subprocess call whose
    command is a string (built with f-strings, + or %) instead of an argument list."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        where = f"{filename}:{node.lineno}"
        func = node.func
        if isinstance(func, ast.Attribute):  # module.func (or obj.method: "?" never matches a module)
            name = (func.value.id if isinstance(func.value, ast.Name) else "?", func.attr)
        else:  # a bare name, e.g. after `from subprocess import run`
            name = (None, func.id if isinstance(func, ast.Name) else "?")
        if any(k.arg == "shell" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
               for k in node.keywords):
            found.append(f"{where}: shell=")
        if name in SHELL_CALLS or name[1] in ("system", "popen") and name[0] in (None, "os"):
            found.append(f"{where}: {'.'.join(n for n in name if n)}")
        if name[1] in SUBPROCESS and name[0] in (None, "subprocess") and node.args and \
                (isinstance(node.args[0], (ast.JoinedStr, ast.BinOp))
                 or isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append(f"{where}: {name[1]} with a string command")
    return found


def test_no_shell_invocation_in_the_runtime_or_tools():
    files = sorted([*(REPO / "edge_rt").rglob("*.py"), *(REPO / "tools").rglob("*.py")])
    assert len(files) > 30
    found = [f for p in files for f in shell_uses(p.read_text(encoding="utf-8"), str(p.relative_to(REPO)))]
    assert not found, found


@pytest.mark.parametrize("snippet", [
    "import subprocess\nsubprocess.run(cmd, shell=True)",
    "import os\nos.system('jack_connect ' + port)",
    "import os\nos.popen(f'ls {d}')",
    "import subprocess\nsubprocess.check_output(f'amixer set {name}')",
    "import subprocess\nsubprocess.Popen('arecord -l')",
    "from subprocess import Popen\nPopen(cmd, shell=flag)",
])
def test_the_scanner_finds_shell_use(snippet):
    assert shell_uses(snippet)


def test_the_scanner_allows_argument_lists():
    assert not shell_uses("import subprocess\nsubprocess.run(['jack_lsp', '-s', name], check=True, shell=False)")
    assert not shell_uses("session.run(None, feeds)\nrun(cmd)")  # ONNX Runtime's run, a list in a variable


def test_metrics_listen_on_loopback_unless_configured():
    assert MetricsConfig().bind == "127.0.0.1" and Config().metrics.port == 0  # off, and loopback when on
    with pytest.raises(ConfigError, match="metrics.bind"):
        Config.from_dict({"metrics": {"bind": "metrics.example.com"}})
    with pytest.raises(ConfigError, match="metrics.port"):
        Config.from_dict({"metrics": {"port": 70000}})
    assert Config.from_dict({"metrics": {"port": 9100, "bind": "::1"}}).metrics.bind == "::1"


def test_the_metrics_server_binds_only_the_loopback_address():
    from edge_rt.ops.metrics import Metrics

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = Metrics()
    m.serve(port)  # the default bind
    try:
        server, _ = m._server
        assert server.server_address[0] == "127.0.0.1"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "edge_rt_capture_lag_seconds" in body
    finally:
        m.close()


@pytest.mark.parametrize("section,key,value,match", [
    ("record", "dir", "sessions", "absolute path"),
    ("record", "dir", "/tmp/a\0b", "NUL"),
    ("record", "dir", "/" + "x" * 5000, "cannot be used as a folder"),
    ("record", "dir", "/etc/passwd", "not a directory"),
    ("pack", "name", "../../etc", "absolute path"),
    ("pack", "name", "a\0b", "built pack"),
    ("audio", "device_in", "USB\0; rm -rf /", "NUL"),
])
def test_paths_and_names_from_the_config_are_validated(section, key, value, match):
    with pytest.raises(ConfigError, match=f"{section}.{key}.*{match}"):
        Config.from_dict({section: {key: value}})
