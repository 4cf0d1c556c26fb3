"""build_report.md rendered from a manifest."""

from __future__ import annotations

from edge_rt.build.report import render_report, write_report

_MODEL = {
    "precision": "int8", "recipe": {"name": "dynamic"}, "calibration": None, "calibration_samples": 96,
    "gate": {"metric": "WER", "fp32": 0.0697, "int8": 0.0697, "delta": 0.0, "limit": 0.01},
    "attempts": [{"recipe": "dynamic", "mode": "dynamic", "quantized_nodes": 12, "mean_speedup": 1.6,
                  "gate": {"metric": "WER", "fp32": 0.0697, "int8": 0.0697}, "result": "passed",
                  "speed": [{"input": "tokens[1, 1]", "threads": 2, "fp32_ms": 3.0, "int8_ms": 2.0, "speedup": 1.5,
                             "fp32_median_ms": 3.1, "int8_median_ms": 2.1}]}],
}


def _manifest(tensorrt: dict) -> dict:
    return {"pack": "tiny", "built_at": "2026-12-01T00:00:00+0000", "built_on": {"machine": "aarch64"},
            "int8": {"seconds": 12.5, "stages": {"asr": {"models": {"decoder": _MODEL}}}}, "tensorrt": tensorrt}


def test_models_attempts_and_speed_are_tables():
    text = render_report(_manifest({"status": "skipped", "reason": "tensorrt is not installed"}))
    assert text.startswith("# Build report: pack `tiny`")
    assert "| asr/decoder | int8 | dynamic | – | 96 | WER | 0.0697 | 0.0697 | 0 | 0.01 | kept INT8 |" in text
    assert "| asr/decoder | dynamic (dynamic) | 12 | x1.6 | WER 0.0697 -> 0.0697 | passed |" in text
    assert "| asr/decoder (dynamic) | tokens[1, 1] | 2 | 3.0 | 2.0 | x1.5 | 3.1 / 2.1 |" in text
    assert "Skipped: tensorrt is not installed." in text


def test_tensorrt_engines_and_fallbacks(tmp_path):
    trt = {"status": "built", "tensorrt_version": "10.3.0", "gpu_name": "Orin", "compute_capability": "8.7",
           "timing_cache": "trt/timing.cache", "engines": {
               "asr/encoder": {"backend": "tensorrt", "file": "trt/asr_encoder.int8.plan", "precision": "int8",
                               "source": "int8/whisper_encoder.onnx", "profiles": 5, "build_s": 80.2, "fallbacks": []},
               "mt/en-pt/decoder": {"backend": "onnxruntime", "file": None, "precision": None, "source": None,
                                    "profiles": 0, "build_s": None, "fallbacks": [
                                        {"from": "fp16", "to": "onnxruntime", "reason": "parser: a|b"}]}}}
    path = write_report(tmp_path, _manifest(trt))
    text = path.read_text()
    assert path.name == "build_report.md" and "TensorRT 10.3.0 on Orin (compute capability 8.7)" in text
    assert ("| asr/encoder | tensorrt | trt/asr_encoder.int8.plan | int8 | int8/whisper_encoder.onnx | 5 | 80.2 | – |"
            in text)
    # A fallback's reason may hold a '|': escaped, so the row keeps its columns.
    assert "| mt/en-pt/decoder | onnxruntime | – | – | – | 0 | – | fp16 -> onnxruntime: parser: a\\|b |" in text


def test_gate_words_and_intervals_are_in_the_report():
    screen = {"metric": "WER", "fp32": 0.06, "int8": 0.065, "delta": 0.005, "limit": 0.01, "n": 42, "items": 42,
              "words": 461, "ci95": [-0.004, 0.013], "rule": "screen", "passed": True}
    full = {"metric": "WER", "fp32": 0.0612, "int8": 0.0655, "delta": 0.0043, "limit": 0.01, "n": 252, "items": 252,
            "words": 2197, "ci95": [0.0011, 0.0078], "rule": "upper95", "passed": True, "screen": screen}
    model = {**_MODEL, "gate": full, "attempts": [{**_MODEL["attempts"][0], "gate": full}]}
    m = _manifest({"status": "skipped", "reason": "x"})
    m["int8"]["stages"]["asr"]["models"]["decoder"] = model
    text = render_report(m)
    assert "## Accuracy gates (INT8 vs FP32 on the same items)" in text
    assert "| asr/decoder | dynamic | screen | 42 | 461 | 0.06 | 0.065 | 0.005 | [-0.0040, +0.0130] | 0.01 | screen | passed the screen |" in text
    assert "| asr/decoder | dynamic | upper95 | 252 | 2197 | 0.0612 | 0.0655 | 0.0043 | [+0.0011, +0.0078] | 0.01 | upper95 | passed |" in text
