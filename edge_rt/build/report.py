"""``engines/<pack>/build_report.md``: the manifest's INT8 and TensorRT figures as tables for people."""

from __future__ import annotations

from pathlib import Path

from edge_rt.atomic import atomic_write

__all__ = ["render_report", "write_report"]


def _f(x, digits: int = 4) -> str:
    return "–" if x is None else (f"{x:.{digits}g}" if isinstance(x, float) else str(x))


def _speed_rows(name: str, speeds: list[dict]) -> list[str]:
    return [f"| {name} | {s['input']} | {s['threads']} | {s['fp32_ms']} | {s['int8_ms']} | x{s['speedup']} | "
            f"{s['fp32_median_ms']} / {s['int8_median_ms']} |" for s in speeds]


def _gate_row(name: str, recipe: str, stage: str, g: dict, result: str) -> str:
    ci = g.get("ci95")
    interval = f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "–"
    verdict = result if stage != "screen" else ("passed the screen" if g.get("passed") else "failed the screen")
    return (f"| {name} | {recipe} | {stage} | {g.get('items', g.get('n', '–'))} | {g.get('words', '–')} | "
            f"{_f(g.get('fp32'))} | {_f(g.get('int8'))} | {_f(g.get('delta'))} | {interval} | {_f(g.get('limit'))} | "
            f"{g.get('rule', 'point')} | {verdict} |")


def render_report(manifest: dict) -> str:
    """Markdown tables of calibration, gates, speed, fallbacks and TensorRT for one built pack."""
    int8 = manifest.get("int8", {})
    lines = [f"# Build report: pack `{manifest.get('pack')}`", "",
             f"Built {manifest.get('built_at', '')} on {manifest.get('built_on', {}).get('machine', '')}; "
             f"INT8 step {int8.get('seconds', '–')} s. Runtime default: INT8 where listed, FP32 otherwise "
             f"(`--precision fp32` forces FP32).", ""]
    cs = int8.get("calibration_set")
    if cs:
        kinds = ", ".join(f"{k} {v}" for k, v in cs["kinds"].items())
        lines += ["## Calibration set", "",
                  f"{cs['audio_samples']} audio samples ({kinds}); {cs['held_out_samples']} held-out samples for the "
                  f"VAD gate; corpus sentences {cs['sentences']} (held out: {cs['held_out_sentences']}); "
                  f"cache key `{cs['key']}`.", ""]
    lines += ["## Models", "", "| model | precision | recipe | calibration | samples | gate | FP32 | INT8 | delta | limit | result |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    speed_lines: list[str] = []
    attempt_lines: list[str] = []
    gate_lines: list[str] = []
    for stage, rec in int8.get("stages", {}).items():
        for model, m in rec.get("models", {}).items():
            name = f"{stage}/{model}"
            g = m.get("gate") or {}
            recipe = (m.get("recipe") or {}).get("name", "–")
            result = "kept INT8" if m.get("precision") == "int8" else m.get("fallback", "FP32")
            if rec.get("borrowed_from"):  # build.py _borrow_int8: the same FP32 files and key in another pack
                result += f" (the INT8 step of pack `{rec['borrowed_from']}`, same files and key)"
            lines.append(f"| {name} | {m.get('precision')} | {recipe} | {_f(m.get('calibration'))} | "
                         f"{m.get('calibration_samples', '–')} | {g.get('metric', '–')} | {_f(g.get('fp32'))} | "
                         f"{_f(g.get('int8'))} | {_f(g.get('delta'))} | {_f(g.get('limit'))} | {result} |")
            for a in m.get("attempts", []):
                ag = a.get("gate") or {}
                for stage_name, gg in (("screen", ag.get("screen")), (ag.get("rule", "point"), ag or None)):
                    if gg:
                        gate_lines.append(_gate_row(name, a["recipe"], stage_name, gg, a.get("result", "")))
                attempt_lines.append(f"| {name} | {a['recipe']} ({a.get('mode', 'static')}) | {a.get('quantized_nodes')} | "
                                     f"x{a.get('mean_speedup', '–')} | {ag.get('metric', '')} {_f(ag.get('fp32'))} -> "
                                     f"{_f(ag.get('int8'))} | {a.get('result')} |")
                speed_lines += _speed_rows(f"{name} ({a['recipe']})", a.get("speed", []))
            tc = m.get("tensor_compare")
            if tc and "outputs" in tc:
                worst = max(tc["outputs"].items(), key=lambda kv: kv[1]["rel_l2"], default=None)
                if worst:
                    attempt_lines.append(f"| {name} | Polygraphy Comparator | {tc['inputs']} inputs | | worst output "
                                         f"`{worst[0]}` rel L2 {worst[1]['rel_l2']}, max abs {worst[1]['max_abs']} | "
                                         f"allclose={tc['allclose']} |")
    lines += ["", "## Accuracy gates (INT8 vs FP32 on the same items)", "",
              "WER gates: paired bootstrap over utterances (fixed seed), 95 % interval of INT8 - FP32; "
              "`upper95` accepts when the interval's upper end is at most the limit, `screen` (a subset) "
              "drops a recipe only when its lower end is above it; `point` compares the point estimate.", "",
              "| model | recipe | stage | items | words | FP32 | INT8 | delta | 95 % interval | limit | rule | result |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|", *gate_lines,
              "", "## Attempts (every recipe tried, in order)", "",
              "| model | recipe | quantized nodes | mean speed-up | gate | result |", "|---|---|---|---|---|---|",
              *attempt_lines, "",
              "## ONNX Runtime speed on this machine (alternating runs: min ms; speed-up = median of the paired "
              "FP32/INT8 ratios, which decides; median ms after the slash)", "",
              "| model | input | threads | FP32 ms | INT8 ms | speed-up | median FP32 / INT8 ms |",
              "|---|---|---|---|---|---|---|", *speed_lines, ""]
    trt = manifest.get("tensorrt", {})
    lines += ["## TensorRT", ""]
    if trt.get("status") != "built":
        lines.append(f"Skipped: {trt.get('reason', 'not run')}.")
    else:
        lines += [f"TensorRT {trt.get('tensorrt_version')} on {trt.get('gpu_name')} (compute capability "
                  f"{trt.get('compute_capability')}); timing cache `{trt.get('timing_cache')}`.", "",
                  "| model | backend | engine | precision | source | profiles | build s | fell back |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, e in trt.get("engines", {}).items():
            fell = "; ".join(f"{f['from']} -> {f['to']}: {f['reason']}" for f in e.get("fallbacks", []))
            fell = fell.replace("|", "\\|") or "–"  # a '|' in a reason would split the row
            lines.append(f"| {name} | {e.get('backend', 'tensorrt')} | {_f(e.get('file'))} | "
                         f"{_f(e.get('precision'))} | {_f(e.get('source'))} | {_f(e.get('profiles'))} | "
                         f"{_f(e.get('build_s'))} | {fell} |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path, manifest: dict) -> Path:
    """Write ``<out_dir>/build_report.md`` (atomically) from a manifest (edge_rt/build/manifest.py)."""
    text = render_report(manifest)
    return atomic_write(Path(out_dir) / "build_report.md", lambda tmp: tmp.write_text(text))
