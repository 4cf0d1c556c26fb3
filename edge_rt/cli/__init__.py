"""``edge-rt``: the only module that reads argv or prints for humans."""

from __future__ import annotations

import argparse
import sys

from edge_rt.cli.measure import _cmd_bench, _cmd_eval, _cmd_selftest
from edge_rt.cli.noise import add_noise_args
from edge_rt.cli.ops import _cmd_doctor, _cmd_replay, _cmd_report, _cmd_serve
from edge_rt.cli.speech import _cmd_devices, _cmd_run, _cmd_translate
from edge_rt.cli.common import (add_noisy_preroll_arg, add_paused_args, add_redecode_arg, add_sound_start_arg,
                               add_split_arg, beam_size)
from edge_rt.errors import EdgeRtError


def _add_pack_args(p: argparse.ArgumentParser, precision: bool = True) -> None:
    """--pack, --threads, --backend and (unless the command has its own ``--precisions``) --precision."""
    p.add_argument("--pack", default="default", help="built pack name under engines/ or its folder (default: default)")
    if precision:
        p.add_argument("--precision", choices=("fp32", "int8"), default="int8",
                       help="engine precision (default int8: the build's gated INT8 models, each falling back to fp32 "
                            "where the build kept it in fp32, see engines/<pack>/build_report.md; fp32 forces fp32)")
    p.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads per engine (default 2)")
    p.add_argument("--backend", choices=("cpu", "tensorrt", "auto"), default="auto",
                   help="what runs the engines: auto (default) = TensorRT where the pack has engines built for this "
                        "TensorRT and GPU, else the CPU (it says which and why); tensorrt fails if it cannot run")


def _add_turn_arg(p: argparse.ArgumentParser) -> None:
    """--complete-after-ms: when a sentence the turn policy judges complete ends (TurnOptions.complete_after_ms)."""
    p.add_argument("--complete-after-ms", type=int, default=None, metavar="MS",
                   help="pause that ends a sentence judged complete (default 256: about the time the decode at a "
                        "pause takes on a 2-core CPU; lower it where that is shorter, e.g. on a GPU)")


def _add_ops_commands(sub) -> None:
    s = sub.add_parser("serve", help="the systemd service: config file, READY/STATUS/WATCHDOG, restarts audio")
    s.add_argument("--config", default=None, help="TOML config (systemd/config.example.toml); flags override it")
    s.add_argument("--to", default=None, help="override translate.to")
    s.add_argument("--from", dest="source", default=None, help="override translate.from")
    s.add_argument("--pack", default=None, help="override pack.name")
    s.add_argument("--precision", choices=("fp32", "int8"), default=None, help="override pack.precision")
    s.add_argument("--backend", choices=("cpu", "tensorrt", "auto"), default=None, help="override engine.backend")
    s.add_argument("--device-in", default=None, help="override audio.device_in")
    s.add_argument("--device-out", default=None, help="override audio.device_out")
    s.add_argument("--record", default=None, help="override record.dir (one session folder per audio open)")
    s.set_defaults(func=_cmd_serve)

    dr = sub.add_parser("doctor", help="check this device: packages, GPU, pack integrity, audio devices, disk")
    dr.add_argument("--config", default=None, help="config to check (default /etc/edge-rt/config.toml if present)")
    dr.add_argument("--quick", action="store_true", help="skip hashing the pack's files and loading it to measure memory")
    dr.add_argument("--json", action="store_true")
    dr.set_defaults(func=_cmd_doctor)

    st = sub.add_parser("selftest", help="on a GPU: TensorRT vs CPU per engine and bucket, WER/chrF, CUDA graphs, "
                                         "bench latency; a report to send back ('skipped: no GPU' elsewhere)")
    st.add_argument("--pack", default="default", help="built pack name under engines/ or its folder (default: default)")
    st.add_argument("--out", default="selftest", help="folder for selftest.md and selftest.json (default ./selftest)")
    st.add_argument("--limit", type=int, default=None, help="at most this many real clips for accuracy and bench")
    st.add_argument("--no-accuracy", action="store_true", help="skip WER/chrF through TensorRT and the CPU")
    st.add_argument("--no-latency", action="store_true", help="skip bench turn latency on TensorRT and the CPU")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_cmd_selftest)

    rp = sub.add_parser("replay", help="re-run a recorded session's input at its pace and compare with the recording")
    rp.add_argument("dir", help="session folder (edge-rt run --record DIR)")
    rp.add_argument("--pack", default=None, help="pack to replay with (default: the recorded one)")
    rp.add_argument("--precision", choices=("fp32", "int8"), default=None)
    rp.add_argument("--speed", type=float, default=1.0, help="replay speed (latencies compare only at 1)")
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=_cmd_replay)

    rr = sub.add_parser("report", help="write a self-contained HTML report of a recorded session")
    rr.add_argument("dir", help="session folder")
    rr.add_argument("-o", "--output", default=None, help="HTML file (default DIR/report.html)")
    rr.set_defaults(func=_cmd_report)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="edge-rt", description="On-device live speech translation.")
    ap.add_argument("--version", action="version", version=f"edge-rt {__import__('edge_rt').__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("translate", help="translate the speech in an audio file into a WAV of translated speech")
    t.add_argument("input", help="audio file (any format/rate/channels libsndfile reads)")
    t.add_argument("--to", required=True, help="target language (en or pt with the default pack)")
    t.add_argument("--from", dest="source", default=None,
                   help="source language, or several (en,de): detect among them only (default: detect any)")
    t.add_argument("-o", "--output", default=None, help="output WAV (default: <input>.<to>.wav)")
    t.add_argument("--beam", type=beam_size, default=1, metavar="N",
                   help="beam search of N hypotheses for the text that is translated (default 1, greedy; 5 as "
                        "faster-whisper: English WER 5.58 -> 5.12 %% on the 12 English clips for ~1.6x the decode "
                        "time: README, Noise)")
    add_redecode_arg(t)
    add_split_arg(t)
    add_noisy_preroll_arg(t)
    add_sound_start_arg(t)
    t.add_argument("--json", action="store_true", help="print utterances and output path as JSON")
    _add_turn_arg(t)
    _add_pack_args(t)
    t.set_defaults(func=_cmd_translate)

    r = sub.add_parser("run", help="live: translate the microphone into the headset")
    r.add_argument("--to", required=True, help="target language (en or pt with the default pack)")
    r.add_argument("--from", dest="source", default=None,
                   help="source language, or several (en,de): detect among them only (default: detect any)")
    r.add_argument("--device-in", default=None, help="capture device: index or part of its name (edge-rt devices)")
    r.add_argument("--device-out", default=None, help="playback device: index or part of its name")
    r.add_argument("--rate-in", type=int, default=None, help="capture rate (default: the device's)")
    r.add_argument("--rate-out", type=int, default=None, help="playback rate (default: the device's)")
    r.add_argument("--audio-backend", choices=("sounddevice", "pyaudio"), default="sounddevice",
                   help="audio library (default sounddevice)")
    r.add_argument("--hangover-ms", type=int, default=288, help="silence that ends an utterance (default 288)")
    r.add_argument("--loudspeaker", action="store_true",
                   help="the speaker is beside the microphone: cancel the echo of what is played before the VAD "
                        "(a 0.5-s ready tone at start lets the echo canceller learn the loudspeaker first)")
    r.add_argument("--no-ready-tone", action="store_true",
                   help="with --loudspeaker: play no ready tone at start (the first reply may then take the voice "
                        "of someone talking over it ~20 dB down)")
    r.add_argument("--barge-in", choices=("duck", "pause", "stop", "continue", "resay"), default=None,
                   help="someone talks over the translation: duck it, pause it until they stop, stop it, continue, "
                        "or resay (pause it; when they went on with the same sentence, say the whole sentence's "
                        "translation instead of the rest) (default: resay with --loudspeaker, continue without)")
    r.add_argument("--beam", type=beam_size, default=1, metavar="N",
                   help="beam search of N hypotheses for the text that is translated (default 1, greedy): live "
                        "English WER 6.51 -> 6.05 %% with 5, turn latency x1.10 and +112 MB on a 2-core CPU "
                        "(README, Noise)")
    add_redecode_arg(r)
    add_split_arg(r)
    add_noisy_preroll_arg(r)
    add_sound_start_arg(r)
    r.add_argument("--trace", default=None, help="append one JSON line per utterance to this file")
    r.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus /metrics on this port (0: off)")
    r.add_argument("--metrics-bind", default="127.0.0.1", help="address for /metrics (default 127.0.0.1)")
    r.add_argument("--record", default=None, help="field test: record the session into this new folder")
    r.add_argument("--latency-budget-ms", type=float, default=1500.0,
                   help="with --record: dump the flight recorder when an utterance is slower (default 1500)")
    _add_turn_arg(r)
    _add_pack_args(r)
    r.set_defaults(func=_cmd_run)

    b = sub.add_parser("bench", help="turn latency of the live loop on the real speech set, vs a serial pipeline")
    b.add_argument("--clip", action="append", default=[], help="clip id from manifest.jsonl (repeatable)")
    b.add_argument("--limit", type=int, default=None, help="at most this many clips")
    b.add_argument("--speech-dir", default=None, help="folder with manifest.jsonl (default ../shared/data/speech)")
    b.add_argument("--no-baseline", action="store_true", help="skip the serial baseline")
    b.add_argument("--no-partials", action="store_true", help="no partial decodes (live captions) during speech")
    b.add_argument("--no-speculation", action="store_true", help="no decode/translate ahead at pauses")
    b.add_argument("--speculate-after-ms", type=int, default=None, metavar="MS",
                   help="pause after which the utterance so far is decoded, translated and its first clause "
                        "synthesized ahead (default: the loop's, 64)")
    b.add_argument("--beam", type=beam_size, default=1, metavar="N",
                   help="the live loop's beam search for the text it translates (default 1, greedy; `run --beam`)")
    add_redecode_arg(b)
    add_split_arg(b)
    add_noisy_preroll_arg(b)
    add_sound_start_arg(b)
    b.add_argument("--no-turn-policy", action="store_true",
                   help="end every pause at the plain hangover (no end-of-turn model, no holding through hesitations)")
    _add_turn_arg(b)
    b.add_argument("--memory", action="store_true",
                   help="also measure the loop's own peak RSS after warm-up and cold start in a fresh process")
    add_paused_args(b, "also run the paused-speech set")
    b.add_argument("--loudspeaker", action="store_true",
                   help="also each clip in loudspeaker mode (`run --loudspeaker`: echo canceller, barge-in resay) "
                        "right after it, its playback heard again 6 dB down and 40 ms late: the mode's cost in "
                        "turn latency as paired ratios, its talk-over and live WER")
    b.add_argument("--no-echo", action="store_true",
                   help="with --loudspeaker: feed no echo of the playback back into the capture")
    b.add_argument("--lead", action="store_true",
                   help="start every clip after 1.024 s of silence, as a person speaking to a loop that has been "
                        "listening (always with --loudspeaker; default: at the stream's first sample)")
    b.add_argument("--room-tone", action="store_true",
                   help="the lead and the tail after each clip are the clip's own room tone, not digital silence "
                        "(a microphone in a room never hands out zeros)")
    b.add_argument("--check", default=None, metavar="FILE",
                   help="perf-regression check: run FILE's clips, fail if a stage's time in units of a speed "
                        "probe grew beyond FILE's tolerance, the loop is not faster than serial, or a clip failed")
    b.add_argument("--record-check", default=None, metavar="FILE",
                   help="write this run's per-stage speeds as a check file (record on an idle machine)")
    b.add_argument("--peer", action="store_true",
                   help="also time faster-whisper + the same MT + Piper/espeak on the same weights (dev extra); with "
                        "--loudspeaker also that stack beside the same loudspeaker, and both runs go on 15 s after "
                        "each clip: how often each translates its own voice")
    b.add_argument("--peer-wait-ms", type=float, default=None, metavar="MS",
                   help="the peer's end-of-speech wait (default: faster-whisper's VAD min_silence_duration_ms, 2000)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--plot", default=None, help="write a PNG: per-stage heat-map and latency distribution")
    b.add_argument("--soak", type=float, default=None, metavar="MINUTES",
                   help="soak instead: speech and silence at real time for MINUTES; RSS, lag, overruns as JSON")
    b.add_argument("--soak-warmup-s", type=float, default=None,
                   help="with --soak: seconds before RSS growth is measured (default: one pass over the clips)")
    _add_pack_args(b)
    b.set_defaults(func=_cmd_bench)

    e = sub.add_parser("eval", help="accuracy on the real speech set: WER/CER, chrF/BLEU, ASR-BLEU, INT8 vs FP32")
    e.add_argument("--clip", action="append", default=[], help="clip id from manifest.jsonl (repeatable)")
    e.add_argument("--limit", type=int, default=None)
    e.add_argument("--precisions", default="int8,fp32", help="comma-separated: int8,fp32 (default both)")
    e.add_argument("--no-spoken", action="store_true", help="skip transcribing the synthesized output back")
    e.add_argument("--json", action="store_true")
    # No --precision here: eval's own is --precisions (argparse reads --precision as it), so a precision
    # given the way every other command takes it is not silently ignored.
    _add_pack_args(e, precision=False)
    add_noise_args(e)  # --noise and its options: edge_rt/cli/noise.py
    e.set_defaults(func=_cmd_eval)

    d = sub.add_parser("devices", help="list audio devices")
    d.add_argument("--audio-backend", choices=("sounddevice", "pyaudio"), default="sounddevice")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_cmd_devices)
    _add_ops_commands(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EdgeRtError as e:
        print(f"edge-rt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("edge-rt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
