"""``edge-rt doctor``'s checks of the built pack: files and hashes, TensorRT engines against this
TensorRT and GPU, the backend ``auto`` picks, and the memory budget of an 8 GB board.

Split from :mod:`edge_rt.ops.doctor` (which runs them with the device checks).
"""

from __future__ import annotations

from edge_rt.build.files import sha256_file
from edge_rt.build.manifest import named_files, stage_files  # what a pack's manifest names, as the build wrote it
from edge_rt.config import Config
from edge_rt.errors import EdgeRtError
from edge_rt.ops.doctor_checks import Check, Gpu

__all__ = ["check_pack", "check_tensorrt_engines", "check_auto_backend", "check_memory"]


# -- the pack -----------------------------------------------------------------
def check_pack(config: Config, gpu: Gpu, trt: str | None, verify: bool = True) -> list[Check]:
    from edge_rt.pack import STAGES, BuiltPack, build_command

    try:
        pack = BuiltPack.load(config.pack.name)
    except EdgeRtError as e:
        return [Check("pack", "fail", str(e))]
    out = [Check("pack", "ok", f"pack '{pack.name}' at {pack.dir} (built {pack.manifest.get('built_at', '?')}, "
                 f"edge-rt {pack.manifest.get('edge_rt_version', '?')})")]
    rebuild = f"rebuild it with `{build_command(pack.name)} --force`"
    for stage in STAGES:
        entry = pack.manifest.get("stages", {}).get(stage)
        if entry is None:
            out.append(Check(f"pack {stage}", "fail", f"pack '{pack.name}' has no '{stage}' stage; {rebuild}"))
            continue
        out.append(_stage_files(pack, stage, entry, verify, rebuild))
    here = None
    if gpu.present and trt is not None:
        from edge_rt.backends.compat import current_environment

        here = current_environment()
    out += check_tensorrt_engines(pack, gpu, here, verify)
    out.append(check_auto_backend(pack))
    out += check_memory(pack, measure=verify)
    return out


def _stage_files(pack, stage: str, entry: dict, verify: bool, rebuild: str) -> Check:
    rels = stage_files(entry)
    missing = [r for r in named_files(entry) if not (pack.dir / r).exists()]  # weights files included
    if missing:
        return Check(f"pack {stage}", "fail", f"missing files: {', '.join(missing)}; {rebuild}")
    hashes = entry.get("sha256")
    if not hashes:
        return Check(f"pack {stage}", "warn", f"{len(rels)} files present, but the manifest records no sha256 "
                     f"(built by an older tools/build_engines.py): integrity not verified; {rebuild}")
    if not verify:
        return Check(f"pack {stage}", "ok", f"{len(rels)} files present (hashes not verified: --quick)")
    bad = [rel for rel, digest in hashes.items() if (pack.dir / rel).is_file() and sha256_file(pack.dir / rel) != digest]
    if bad:
        return Check(f"pack {stage}", "fail", f"sha256 mismatch (corrupt or edited): {', '.join(bad)}; {rebuild}")
    return Check(f"pack {stage}", "ok", f"{len(hashes)} files match their sha256")


def check_tensorrt_engines(pack, gpu: Gpu, here, verify: bool = True) -> list[Check]:
    """The manifest's ``tensorrt`` section (what build/tensorrt.py writes): the engines were built for
    exactly this TensorRT and GPU (:mod:`edge_rt.backends.compat`), their files match, fall-backs listed."""
    from edge_rt.backends.compat import TrtEnvironment, notes, problems, rebuild_command

    section = pack.manifest.get("tensorrt", {})
    rebuild = f"`{rebuild_command(pack.name)}` on this device"
    if section.get("status") != "built":
        return [Check("pack tensorrt", "info", f"no TensorRT engines ({section.get('reason', 'not built')}); the "
                      f"CPU engines run" + (f"; build them with {rebuild}" if gpu.present else ""))]
    built = TrtEnvironment.from_dict(section)
    engines = section.get("engines", {})
    plans = {k: e for k, e in engines.items() if e.get("backend", "tensorrt") == "tensorrt" and e.get("file")}
    label = (f"{len(plans)} of {len(engines)} models built for TensorRT {built.tensorrt_version} on "
             f"{built.gpu_name} ({built.compute_capability})")
    if not gpu.present:
        return [Check("pack tensorrt", "info", f"{label}, but there is no GPU here: the CPU engines run")]
    found = problems(built, here)
    if found:
        return [Check("pack tensorrt", "fail", f"{label}; {'; '.join(found)}: engines are device-specific: rebuild "
                      f"with {rebuild} (or run with --backend cpu)")]
    out = [Check("pack tensorrt", "ok", f"{label}" + "".join(f"; note: {n}" for n in notes(built, here)))]
    missing = [e["file"] for e in plans.values() if not (pack.dir / e["file"]).is_file()]
    bad = [e["file"] for e in plans.values() if verify and e.get("sha256") and (pack.dir / e["file"]).is_file()
           and sha256_file(pack.dir / e["file"]) != e["sha256"]]
    if missing or bad:
        out.append(Check("pack tensorrt files", "fail", f"missing: {missing or 'none'}; sha256 mismatch: "
                         f"{bad or 'none'}; rebuild with {rebuild}"))
    for name, e in engines.items():
        for f in e.get("fallbacks", []):
            out.append(Check(f"tensorrt {name}", "warn" if f["to"] == "onnxruntime" else "info",
                             f"{f['from']} fell back to {f['to']}: {f['reason']}"))
    return out


def check_auto_backend(pack) -> Check:
    """Which backend ``--backend auto`` picks for this pack here, and why."""
    try:
        from edge_rt.backends.factory import choose_backend
    except ImportError:
        choose_backend = None
    if choose_backend is not None:
        choice = choose_backend(pack, "auto")
        name, why = choice.name, choice.reason
    else:
        from edge_rt.backends.compat import auto_backend_reason

        name, why = auto_backend_reason(pack)
    return Check("backend auto", "info", f"--backend auto runs on {name}: {why}")


def check_memory(pack, measure: bool = True) -> list[Check]:
    """The 8 GB Orin Nano budget: engine files, activation memory, host RSS of the loaded pack, a verdict."""
    from edge_rt.ops.memory_budget import ORIN_NANO_MB, budget

    try:
        b = budget(pack, measure=measure)
    except (EdgeRtError, OSError) as e:
        return [Check("memory", "warn", f"memory budget not computed: {e}")]
    rec = sum(m.activation_recorded for m in b.models)
    trt = [m for m in b.models if m.backend == "tensorrt"]
    out = [Check("memory engines", "info", f"TensorRT plans {b.engine_mb:.0f} MB ({len(trt)} models); ONNX models "
                 f"the CPU engines load {b.onnx_mb:.0f} MB ({len(b.models)} models)"),
           Check("memory activations", "info",
                 f"{sum(m.activation_bytes for m in b.models) / 2**20:.0f} MB: TensorRT recorded {rec} of "
                 f"{len(b.models)} models; the rest estimated from the ONNX I/O buffers at the largest bucket "
                 f"(a lower bound)")]
    if b.host_rss_mb is not None:
        out.append(Check("memory host", "info", f"RSS with the pack loaded on the CPU engines: +{b.host_rss_mb:.0f} MB "
                         f"over a {b.base_rss_mb:.0f} MB process"))
    for backend in ("cpu", "tensorrt") if trt else ("cpu",):
        status, text = b.verdict(backend, ORIN_NANO_MB)
        out.append(Check(f"memory {ORIN_NANO_MB // 1024} GB Orin Nano ({backend})", status, text))
    return out
