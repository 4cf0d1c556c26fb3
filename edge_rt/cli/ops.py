"""`edge-rt serve`, `doctor`, `replay` and `report`: running on a device."""

from __future__ import annotations

import argparse
import json
import sys

from edge_rt.cli.common import _show_caption


EX_CONFIG = 78  # sysexits.h: the unit's RestartPreventExitStatus= stops systemd restarting on a bad config


def _serve_overrides(args: argparse.Namespace) -> dict:
    return {"translate__to": args.to, "translate__from": args.source, "pack__name": args.pack,
            "pack__precision": args.precision, "engine__backend": args.backend, "audio__device_in": args.device_in,
            "audio__device_out": args.device_out, "record__dir": args.record}


def _cmd_serve(args: argparse.Namespace) -> int:
    import signal

    from rich.console import Console

    from edge_rt.config import Config, ConfigError, load_config
    from edge_rt.loop.captions import Captions
    from edge_rt.ops.serve import Server
    from edge_rt.ops.service import Notifier

    console = Console(stderr=True)
    try:
        config = (load_config(args.config) if args.config else Config()).override(**_serve_overrides(args))
    except ConfigError as e:
        print(f"edge-rt: error: {e}", file=sys.stderr)
        return EX_CONFIG
    notifier = Notifier.from_env()
    server = Server(config, notifier, log=lambda m: console.print(m, highlight=False, soft_wrap=True),
                    on_caption=Captions(_show_caption(Console())))
    signal.signal(signal.SIGINT, lambda s, f: server.stop())
    signal.signal(signal.SIGTERM, lambda s, f: server.stop())
    try:
        code = server.run()
    finally:
        notifier.close()
    console.print(f"stopped after {server.sessions} audio session(s)", highlight=False)
    return code


def _cmd_doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from edge_rt.config import DEFAULT_CONFIG_PATH, Config, ConfigError, load_config
    from edge_rt.ops.doctor import blocking, run_checks

    path = args.config or (str(DEFAULT_CONFIG_PATH) if DEFAULT_CONFIG_PATH.is_file() else None)
    problem = None
    config = Config()
    if path:
        try:
            config = load_config(path)
        except ConfigError as e:
            problem = str(e)
    checks = run_checks(config, problem, verify_hashes=not args.quick)
    failed = blocking(checks)
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [c.as_dict() for c in checks]}, ensure_ascii=False, indent=2))
    else:
        styles = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}
        table = Table("check", "status", "finding / fix")
        for c in checks:
            table.add_row(c.name, f"[{styles[c.status]}]{c.status}[/]", c.message)
        Console().print(table)
        Console().print(f"[bold red]{len(failed)} blocking problem(s)[/]" if failed else "[green]ready to run[/]")
    return 1 if failed else 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from edge_rt.ops.replay import ReplayOptions, compare, replay_session
    from edge_rt.ops.session import Session

    session = Session.load(args.dir)
    traces = replay_session(session, ReplayOptions(pack=args.pack, precision=args.precision, speed=args.speed))
    result = compare(session.traces, [t.as_dict() for t in traces])
    if args.json:
        print(json.dumps(result.as_dict(), ensure_ascii=False, indent=2))
        return 0
    fmt = (lambda v: "–" if v is None else f"{v:.0f}")
    table = Table("time", "recorded", "replay", "same", "rec ms", "replay ms")
    for r in result.rows:
        rec, rep = r["recorded"] or {}, r["replay"] or {}
        table.add_row(f'{r["start_s"]:.1f}s', rec.get("text", "–"), rep.get("text", "–"),
                      "yes" if r["same_text"] else "[red]no[/]", fmt(rec.get("latency_ms")), fmt(rep.get("latency_ms")))
    console = Console()
    console.print(table)
    d = result.as_dict()["latency_ms"]
    console.print(f"transcripts {'identical' if result.same_transcripts else '[red]differ[/]'}; latency p50 "
                  f"recorded {fmt(d['recorded']['p50'])} ms, replay {fmt(d['replay']['p50'])} ms", highlight=False)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from edge_rt.ops.session_report import write_report

    out = write_report(args.dir, args.output)
    print(out)
    return 0
