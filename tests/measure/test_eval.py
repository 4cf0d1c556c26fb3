"""`edge-rt eval` on a few real clips (tiny pack: fast)."""

from __future__ import annotations

import json
import subprocess
import sys

from edge_rt.measure.eval import EvalOptions, evaluate


def test_eval_scores_the_engines_and_the_product_path(tiny_pack):
    r = evaluate(EvalOptions(pack="tiny", precisions=("int8", "fp32"), clips=(
        "en_jfk", "en_librispeech_1089-134691-0001", "en_fleurs_1728", "fr_fleurs_test_005")))
    for p in ("int8", "fp32"):
        res = r["precisions"][p]
        assert set(res["asr"]) == {"en"}  # tiny.en cannot recognise French: that clip is skipped
        assert res["asr"]["en"]["n"] == 3
        # Measured on both precisions: 1.85 % (1 error in the 54 reference words) on the whole clips,
        # 11.1 % (int8) / 9.3 % (fp32) through the loop's segmentation. Greedy decoding of fixed weights:
        # allow one more error on the whole clips and two more through the loop.
        assert res["asr"]["en"]["value"] <= 3.8, res["asr"]
        assert res["asr_live_segmentation"]["en"]["value"] <= 15.0, res["asr_live_segmentation"]
        assert "spoken_roundtrip_wer" not in res  # tiny.en cannot hear the Portuguese output back
    assert "en" in r["int8_minus_fp32"]["asr"]


def test_eval_hears_the_spoken_output_back(default_pack):
    r = evaluate(EvalOptions(pack="default", precisions=("int8",), clips=("es_fleurs_test_006",)))
    res = r["precisions"]["int8"]
    assert res["translation"]["n"] == 1 and res["translation"]["chrf"] > 20  # a real es->en reference
    assert res["asr_bleu"]["n"] == 1
    assert res["spoken_roundtrip_wer"] <= 50.0, res["clips"]


def test_eval_cli_json_and_bad_precision(tiny_pack):
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "eval", "--pack", "tiny", "--precisions", "fp16"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "int8 and/or fp32" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "edge_rt", "eval", "--pack", "tiny", "--precisions", "fp32",
                           "--clip", "en_jfk", "--no-spoken", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["precisions"]["fp32"]["asr"]["en"]["n"] == 1
