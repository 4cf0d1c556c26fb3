#!/usr/bin/env python
"""Record what the built packs' INT8 step chose for each model, for CI's second build to compare.

CI builds the default pack from scratch (`tools/test.sh`), then `tests/build/test_pack_choices.py`
checks that its build chose every model's precision and recipe as the build recorded here did, and
gated on the same number of reference words. One record per class of integer products (VNNI, AVX2
only: `edge_rt.build.manifest.integer_products`), since INT8 accuracy differs between them; recording
on one class keeps the others' records. Re-record after a change that is meant to change a
choice (a recipe, the plan, a gate), on a fresh build:

    python tools/build_engines.py --pack default --force
    python tools/record_pack_choices.py            # writes tests/build/pack_choices.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.build.manifest import cpu_flags, gate_words, int8_choices, integer_products  # noqa: E402
from edge_rt.pack import BuiltPack  # noqa: E402

RECORD = Path(__file__).resolve().parents[1] / "tests" / "build" / "pack_choices.json"


def _cpu() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?")
    flags = cpu_flags(info)
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "asimddp") if f in flags]
    return f"{name} ({', '.join(isa) or 'no avx2'})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pack", nargs="+", default=["default"])
    ap.add_argument("--out", type=Path, default=RECORD)
    args = ap.parse_args(argv)
    packs = {}
    for name in args.pack:
        m = BuiltPack.load(name).manifest
        packs[name] = {"built_at": m.get("built_at"), "choices": int8_choices(m), "gate_words": gate_words(m)}
    record = {"recorded": time.strftime("%Y-%m-%d"), "machine": _cpu(), "packs": packs}
    whole = json.loads(args.out.read_text()) if args.out.is_file() else {}
    whole.setdefault("note", "one record per class of integer products (edge_rt.build.manifest.integer_products): "
                             "INT8 accuracy, so the gates' choices, differ between them")
    whole.setdefault("by_integer_products", {})[integer_products()] = record  # the other classes' records stay
    args.out.write_text(json.dumps(whole, indent=2) + "\n")
    print(f"wrote {args.out} ({integer_products()} integer products)")
    for name, p in packs.items():
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in p["choices"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
