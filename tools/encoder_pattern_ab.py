"""Whisper encoder time per window bucket with and without ONNX Runtime's memory pattern (backends/factory.py,
ORT_TUNING "asr/encoder"). Run each setting in its own process, interleaved:

    for i in 1 2; do python tools/encoder_pattern_ab.py on; python tools/encoder_pattern_ab.py off; done
"""

from __future__ import annotations

import sys
import time

import edge_rt.backends.factory as factory


def main() -> int:
    setting = sys.argv[1] if len(sys.argv) > 1 else "off"
    if setting not in ("on", "off"):
        raise SystemExit("usage: python tools/encoder_pattern_ab.py on|off [pack] [clip.wav]")
    factory.ORT_TUNING["asr/encoder"] = {"mem_pattern": setting == "on"}
    from edge_rt.audio.files import read_audio
    from edge_rt.pack import BuiltPack
    from edge_rt.pipeline import StageOptions, load_stages
    from edge_rt.stages.asr import mel as melmod
    from edge_rt.units import SAMPLE_RATE, bucket_frames

    pack = sys.argv[2] if len(sys.argv) > 2 else "default"
    clip = sys.argv[3] if len(sys.argv) > 3 else "../shared/data/speech/de_fleurs_test_009.wav"
    stages = load_stages(BuiltPack.load(pack), StageOptions(precision="int8"))
    inference = stages.asr._inference
    audio = read_audio(clip)
    best = {}
    for bucket in stages.asr.buckets_s:
        frames = bucket_frames(bucket)
        mel = melmod.window(melmod.log_mel(audio[: bucket * SAMPLE_RATE]), 0, frames, out=inference.mel_buffer(frames))
        inference.encode(mel)  # the first run plans and allocates
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            inference.encode(mel)
            times.append(time.perf_counter() - t0)
        best[bucket] = round(1000 * min(times), 1)
    print(f"memory pattern {setting}: best of 5 per window (ms) {best}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
