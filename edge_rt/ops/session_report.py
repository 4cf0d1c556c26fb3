"""``edge-rt report DIR``: one self-contained HTML page about a recorded session.

Inline SVG only (no JavaScript, no network, no plotting dependency): a
timeline of speech and translated speech, the turn latency of each utterance
against the budget, and a heat-map of where each utterance's time went.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np

from edge_rt.errors import EdgeRtError
from edge_rt.ops.session import Session
from edge_rt.loop.trace import percentiles
from edge_rt.units import SAMPLE_RATE

__all__ = ["render_report"]

STAGES = ("endpoint_wait", "asr_final", "mt", "tts_first_chunk", "playback")
WIDTH = 1000  # px of every chart
ENVELOPE_S = 0.05  # one envelope point per 50 ms


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _envelope(audio: np.ndarray, rate: int) -> np.ndarray:
    """Peak level per ENVELOPE_S window."""
    hop = max(1, int(rate * ENVELOPE_S))
    n = len(audio) // hop
    if n == 0:
        return np.zeros(0)
    return np.abs(audio[: n * hop]).reshape(n, hop).max(axis=1)


def _envelope_path(env: np.ndarray, x0: float, y_mid: float, half: float, scale: float) -> str:
    if env.size == 0:
        return ""
    peak = max(float(env.max()), 1e-3)
    xs = x0 + np.arange(env.size) * ENVELOPE_S * scale
    top = " ".join(f"{x:.1f},{y_mid - half * v / peak:.1f}" for x, v in zip(xs, env))
    bottom = " ".join(f"{x:.1f},{y_mid + half * v / peak:.1f}" for x, v in zip(xs[::-1], env[::-1]))
    return f'<polygon points="{top} {bottom}" fill="currentColor" opacity="0.5"/>'


def _timeline(session: Session, traces: list[dict], budget_ms: float) -> str:
    try:
        inp = session.input_audio()
    except EdgeRtError:  # recorded without audio (or it is unreadable): the timeline shows spans only
        inp = None
    out = session.output_audio()
    ends = [t["end_sample"] / SAMPLE_RATE + (t.get("turn_latency_ms") or 0) / 1000 for t in traces]
    duration = max([len(inp) / SAMPLE_RATE if inp is not None else 0.0,
                    len(out[0]) / out[1] if out else 0.0, *ends, 1.0])
    left, width = 90, WIDTH - 100
    scale = width / duration
    rows = {"input": 30, "speech": 80, "output": 130, "translation": 175}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="230" viewBox="0 0 {WIDTH} 230" '
             f'font-family="sans-serif" font-size="11">']
    for name, y in rows.items():
        parts.append(f'<text x="4" y="{y + 4}">{name}</text>')
    if inp is not None:
        parts.append(f'<g color="#3366aa">{_envelope_path(_envelope(inp, SAMPLE_RATE), left, rows["input"], 18, scale)}</g>')
    if out:
        parts.append(f'<g color="#2a8a4a">{_envelope_path(_envelope(out[0], out[1]), left, rows["output"], 18, scale)}</g>')
    for t in traces:
        a, b = t["start_sample"] / SAMPLE_RATE, t["end_sample"] / SAMPLE_RATE
        x, w = left + a * scale, max(1.0, (b - a) * scale)
        title = _e(f'#{t["utterance"]} {t.get("lang", "")}: {t.get("text", "")}')
        parts.append(f'<rect x="{x:.1f}" y="{rows["speech"] - 10}" width="{w:.1f}" height="20" fill="#3366aa" '
                     f'opacity="0.8"><title>{title}</title></rect>')
        parts.append(f'<text x="{x:.1f}" y="{rows["speech"] - 13}">#{t["utterance"]}</text>')
        lat = t.get("turn_latency_ms")
        if lat is not None:
            xo = left + (b + lat / 1000) * scale
            late = lat > budget_ms
            colour = "#cc3333" if late else "#2a8a4a"
            parts.append(f'<line x1="{left + b * scale:.1f}" y1="{rows["speech"] + 10}" x2="{xo:.1f}" '
                         f'y2="{rows["translation"] - 8}" stroke="{colour}" stroke-width="1"/>')
            parts.append(f'<circle cx="{xo:.1f}" cy="{rows["translation"]}" r="5" fill="{colour}">'
                         f'<title>{_e(t.get("translation", ""))} ({lat:.0f} ms)</title></circle>')
    for s in range(0, int(duration) + 1, max(1, int(duration // 10) or 1)):
        x = left + s * scale
        parts.append(f'<line x1="{x:.1f}" y1="200" x2="{x:.1f}" y2="205" stroke="#666"/>'
                     f'<text x="{x:.1f}" y="218" text-anchor="middle">{s} s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _latency_chart(traces: list[dict], budget_ms: float) -> str:
    lats = [(t["utterance"], t.get("turn_latency_ms")) for t in traces]
    top = max([budget_ms * 1.2] + [v for _, v in lats if v is not None])
    height, left, bottom = 220, 60, 190
    scale = (bottom - 20) / top
    bar = max(4.0, min(40.0, (WIDTH - left - 20) / max(1, len(lats)) - 4))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">']
    for ms in np.linspace(0, top, 5):
        y = bottom - ms * scale
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - 10}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{ms:.0f}</text>')
    yb = bottom - budget_ms * scale
    parts.append(f'<line x1="{left}" y1="{yb:.1f}" x2="{WIDTH - 10}" y2="{yb:.1f}" stroke="#cc3333" '
                 f'stroke-dasharray="4 3"/><text x="{WIDTH - 12}" y="{yb - 4:.1f}" text-anchor="end" '
                 f'fill="#cc3333">budget {budget_ms:.0f} ms</text>')
    for i, (n, v) in enumerate(lats):
        x = left + 4 + i * (bar + 4)
        if v is None:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{bottom - 4}" text-anchor="middle">–</text>')
        else:
            colour = "#cc3333" if v > budget_ms else "#3366aa"
            parts.append(f'<rect x="{x:.1f}" y="{bottom - v * scale:.1f}" width="{bar:.1f}" height="{v * scale:.1f}" '
                         f'fill="{colour}"><title>#{n}: {v:.0f} ms</title></rect>')
        parts.append(f'<text x="{x + bar / 2:.1f}" y="{bottom + 14}" text-anchor="middle">#{n}</text>')
    parts.append('<text x="4" y="12">ms</text></svg>')
    return "".join(parts)


def _heatmap(traces: list[dict]) -> str:
    cell_w, cell_h, left, top = 150, 22, 60, 24
    values = [[(t.get("stages_ms") or {}).get(s) for s in STAGES] for t in traces]
    vmax = max([v for row in values for v in row if v is not None] + [1.0])
    height = top + cell_h * len(traces) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + cell_w * len(STAGES) + 10}" height="{height}" '
             f'font-family="sans-serif" font-size="11">']
    for j, s in enumerate(STAGES):
        parts.append(f'<text x="{left + j * cell_w + cell_w / 2}" y="16" text-anchor="middle">{s}</text>')
    for i, (t, row) in enumerate(zip(traces, values)):
        y = top + i * cell_h
        parts.append(f'<text x="4" y="{y + 15}">#{t["utterance"]}</text>')
        for j, v in enumerate(row):
            x = left + j * cell_w
            if v is None:
                fill, label = "#f4f4f4", "–"
            else:
                k = min(1.0, max(0.0, v) / vmax) ** 0.5  # sqrt: small stages stay visible
                fill = f"rgb(255,{int(255 - 200 * k)},{int(255 - 220 * k)})"
                label = f"{v:.0f} ms"
            parts.append(f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" fill="{fill}"/>'
                         f'<text x="{x + cell_w / 2}" y="{y + 15}" text-anchor="middle">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table_row(t: dict) -> str:
    lat = t.get("turn_latency_ms")
    cells = (f'#{t["utterance"]}', f'{t["start_sample"] / SAMPLE_RATE:.2f}–{t["end_sample"] / SAMPLE_RATE:.2f} s',
             t.get("lang", ""), t.get("text", ""), t.get("translation", ""),
             "" if lat is None else f"{lat:.0f} ms", t.get("dropped", ""))
    return "<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>\n"


def render_report(folder: str | Path) -> str:
    """The HTML page of a recorded session (call :func:`write_report` to save it)."""
    s = Session.load(folder)
    h = s.header
    traces = s.traces
    budget = float((h.get("options") or {}).get("latency_budget_ms") or 1500)
    lat = percentiles(t.get("turn_latency_ms") for t in traces)
    devices = h.get("devices") or {}
    dev = " → ".join(_e((devices.get(k) or {}).get("name", "file")) for k in ("in", "out"))
    rows = "".join(_table_row(t) for t in traces)
    dumps = "".join(f"<li>{_e(p.parent.name)}</li>" for p in s.flight_dumps()) or "<li>none</li>"
    fmt = (lambda v: "–" if v is None else f"{v:.0f} ms")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>edge-rt session {_e(s.dir.name)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:{WIDTH + 40}px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}}svg{{display:block;margin:1em 0}}</style>
</head><body>
<h1>edge-rt session {_e(s.dir.name)}</h1>
<p>started {_e(h.get("started_at", "?"))}, {_e(h.get("duration_s", "?"))} s; pack {_e((h.get("pack") or {}).get("name", "?"))}
({_e((h.get("pack") or {}).get("precision", "?"))}); {_e((h.get("options") or {}).get("from") or "auto")} →
{_e((h.get("options") or {}).get("to", "?"))}; devices {dev}</p>
<p>{len(traces)} utterances; turn latency p50 {fmt(lat["p50"])}, p95 {fmt(lat["p95"])}; budget {budget:.0f} ms</p>
<h2>Timeline</h2>
{_timeline(s, traces, budget)}
<h2>Latency per utterance</h2>
{_latency_chart(traces, budget)}
<h2>Where the time went</h2>
{_heatmap(traces)}
<h2>Utterances</h2>
<table><tr><th>#</th><th>speech</th><th>lang</th><th>heard</th><th>translation</th><th>latency</th><th>dropped</th></tr>
{rows}</table>
<h2>Flight-recorder dumps</h2><ul>{dumps}</ul>
</body></html>
"""


def write_report(folder: str | Path, out: str | Path | None = None) -> Path:
    from edge_rt.atomic import atomic_write

    path = Path(out) if out else Path(folder) / "report.html"
    text = render_report(folder)
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
