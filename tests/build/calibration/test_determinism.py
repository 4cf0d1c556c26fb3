"""Two runs of the INT8 step from the same inputs take the same decisions and write the same bytes.

The step runs for one small model of the tiny pack (Marian en-pt encoder: calibration, a static
recipe calibrated for TensorRT but not tried on the CPU, a dynamic recipe timed and gated on chrF) in two scratch copies of the pack
(the FP32 files and assets are linked, ``int8/`` is written fresh), with the TensorRT twin off to
keep the test short (~1 min).
"""

from __future__ import annotations

import copy
import json

import pytest

from edge_rt.build.calibration.int8 import quantize_pack
from edge_rt.build.calibration.model_steps import NOT_ON_CPU
from edge_rt.build.calibration.plan import PLAN, Int8Options, ModelPlan, plan_for
from edge_rt.build.files import sha256_file
from edge_rt.build.manifest import int8_choices

STAGE, MODEL = "mt", "en-pt/encoder"


def _scratch(pack, root):
    out = root / pack.name
    out.mkdir(parents=True)
    for part in ("fp32", "assets"):
        (out / part).symlink_to(pack.dir / part, target_is_directory=True)
    stages = json.loads((pack.dir / "manifest.json").read_text())["stages"]
    for entry in stages.values():  # the copy starts FP32-only, like a fresh export
        for m in entry["models"].values():
            m.pop("int8", None)
            m.pop("int8_trt", None)
    return out, stages


def _decisions(section: dict) -> dict:
    """Everything a build decides and measures except times and speeds (which are measurements of the machine)."""
    m = section["stages"][STAGE]["models"][MODEL]
    return {"precision": m["precision"], "recipe": (m.get("recipe") or {}).get("name"), "gate": m.get("gate"),
            "files": m.get("files"), "calibration_samples": m.get("calibration_samples"),
            "attempts": [{k: a.get(k) for k in ("recipe", "quantized_nodes", "gate")} for a in m["attempts"]],
            "key": section["stages"][STAGE]["key"]}


def test_two_runs_of_the_int8_step_decide_and_write_alike(tiny_pack, tmp_path):
    plan = {STAGE: (plan_for(STAGE, MODEL, PLAN),)}
    assert plan[STAGE][0] is not None
    plan[STAGE] = (ModelPlan("en-pt/encoder", plan[STAGE][0].recipes, plan[STAGE][0].max_samples,
                             plan[STAGE][0].num_bins),)
    options = Int8Options(plan=plan, tensorrt_twins=False, force=True)
    runs = []
    for name in ("a", "b"):
        out, stages = _scratch(tiny_pack, tmp_path / name)
        section = quantize_pack(out, copy.deepcopy(stages), {}, options, log=lambda _: None)
        rec = section["stages"][STAGE]["models"][MODEL]
        bytes_ = {rel: sha256_file(out / rel) for rel in rec.get("files", {})}
        runs.append((_decisions(section), bytes_, section["calibration_set"]["key"], rec["attempts"][0]))
    (d1, b1, k1, first), (d2, b2, k2, _) = runs
    assert k1 == k2
    assert d1 == d2, "two INT8 runs from the same inputs decided differently"
    assert b1 == b2 and b1, "two INT8 runs wrote different INT8 bytes"
    # The static recipe is calibrated (for the TensorRT twin) but never timed or gated as the CPU engine.
    assert first["recipe"] == "full" and first["result"] == NOT_ON_CPU and "speed" not in first
    assert d1["calibration_samples"], "the static recipe's entropy calibration (for the TensorRT twin) did not run"
    if d1["precision"] == "int8":
        assert d1["gate"]["passed"]
    else:
        pytest.fail(f"the en-pt encoder is INT8 in the built tiny pack but fell back here: {d1['attempts']}")


def test_a_second_build_of_the_pack_chooses_alike(request):
    """Two builds on one machine (CI compares its build with the recorded one: tests/build/test_pack_choices.py):

        python tools/build_engines.py --pack default --out /tmp/second --force
        EDGE_RT_SECOND_BUILD=/tmp/second/default python -m pytest -q tests/build/calibration/test_determinism.py
    """
    import os
    from pathlib import Path

    second = os.environ.get("EDGE_RT_SECOND_BUILD")
    if not second:
        pytest.skip("set EDGE_RT_SECOND_BUILD to a second build of a pack (see the docstring) to compare choices")
    other = json.loads((Path(second) / "manifest.json").read_text())
    pack = request.getfixturevalue(f"{other['pack']}_pack")
    assert int8_choices(other) == int8_choices(pack.manifest)
    assert int8_choices(other), "the second build recorded no INT8 decision"
