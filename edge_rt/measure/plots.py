"""Pictures of a bench run (matplotlib, imported lazily: ``pip install 'edge-rt[plot]'``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_rt.errors import EdgeRtError

STAGES = ("endpoint_wait", "asr_final", "mt", "tts_first_chunk", "playback")


def bench_plot(result: dict, path: str | Path) -> Path:
    """Per-stage latency heat-map (stages × clips) and the turn-latency distribution, in one PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise EdgeRtError(f"--plot needs matplotlib ({e}); `pip install 'edge-rt[plot]'`") from e
    clips = result["clips"]
    if not clips:
        raise EdgeRtError("the bench ran no clip: nothing to plot")
    grid = np.array([[c["stages_ms"].get(s) if c["stages_ms"].get(s) is not None else np.nan for c in clips]
                     for s in STAGES], dtype=float)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8, 0.35 * len(clips) + 3), 8),
                                   gridspec_kw={"height_ratios": [1.2, 1]})
    im = ax1.imshow(grid, aspect="auto", cmap="magma_r")
    ax1.set_yticks(range(len(STAGES)), STAGES)
    ax1.set_xticks(range(len(clips)), [c["id"] for c in clips], rotation=70, ha="right", fontsize=7)
    ax1.set_title(f"per-stage latency (ms), pack {result['pack']}, {result['precision']}")
    fig.colorbar(im, ax=ax1, label="ms")
    live = [c["turn_latency_ms"] for c in clips if c["turn_latency_ms"] is not None]
    base = [c["serial_ms"] for c in clips if c.get("serial_ms") is not None]
    peer = [c["peer_ms"] for c in clips if c.get("peer_ms") is not None]
    bins = np.linspace(0, max(live + base + peer + [500]) * 1.05, 30)
    ax2.hist(live, bins=bins, alpha=0.7, label="live loop")
    if base:
        ax2.hist(base, bins=bins, alpha=0.5, label="serial, same engines")
    if peer:
        ax2.hist(peer, bins=bins, alpha=0.4, label="faster-whisper + Piper stack")
    for q, style in (("p50", "-"), ("p95", "--")):
        v = result["turn_latency_ms"][q]
        if v is not None:
            ax2.axvline(v, color="k", linestyle=style, label=f"live {q} {v:.0f} ms")
    ax2.set_xlabel("turn latency: end of speech → first translated sample (ms)")
    ax2.set_ylabel("clips")
    ax2.legend()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
