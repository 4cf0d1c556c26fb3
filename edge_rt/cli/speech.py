"""`edge-rt translate`, `run` and `devices`: speech in, translated speech out."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from edge_rt.cli.common import _say_backend, _show_caption, _stage_options, _turn_options
from edge_rt.errors import EdgeRtError


def _sources(value: str | None) -> tuple[str | None, tuple[str, ...] | None]:
    """``--from``: one code (the source), several separated by commas (detect among them), or none."""
    codes = tuple(dict.fromkeys(c.strip() for c in (value or "").split(",") if c.strip()))
    if len(codes) <= 1:
        return (codes[0] if codes else None), None
    return None, codes


def _cmd_translate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from edge_rt.audio.files import read_audio, write_audio
    from edge_rt.pipeline import Pipeline
    from edge_rt.translate import TranslateOptions, translate_audio

    console = Console(stderr=True)
    turn = _turn_options(args)  # a bad option first, then a bad file, both before loading any model
    audio = read_audio(args.input)  # fail on a bad file before loading any model
    out = Path(args.output) if args.output else Path(args.input).with_name(f"{Path(args.input).stem}.{args.to}.wav")
    t0 = time.perf_counter()
    pipe = Pipeline.load(args.pack, _stage_options(args))
    stages = pipe.stages
    load_s = time.perf_counter() - t0
    _say_backend(console, pipe)
    t1 = time.perf_counter()
    spoken, languages = _sources(args.source)
    utts, track, rate = translate_audio(stages, audio, TranslateOptions(target=args.to, source=spoken,
                                                                        languages=languages, beam_size=args.beam,
                                                                        redecode=args.redecode, split=args.split,
                                                                        noisy_preroll=args.noisy_preroll,
                                                                        sound_start=args.sound_start, turn=turn))
    write_audio(out, track, rate)
    run_s = time.perf_counter() - t1
    if args.json:
        print(json.dumps({"utterances": [u.as_dict() for u in utts], "output": str(out),
                          "sample_rate": rate, "load_s": round(load_s, 3), "run_s": round(run_s, 3),
                          "beam_size": args.beam,
                          "redecode": None if args.redecode is None else args.redecode.below_logprob,
                          "split": None if args.split is None else args.split.below_tokens_per_s,
                          "noisy_preroll": None if args.noisy_preroll is None else args.noisy_preroll.below_db,
                          "sound_start": None if args.sound_start is None else args.sound_start.above_db,
                          "backend": {"name": pipe.backend.name, "reason": pipe.backend.reason}},
                         ensure_ascii=False, indent=2))
    else:
        for u in utts:
            console.print(f"[dim]{u.start_s:6.2f}–{u.end_s:6.2f}s[/] [cyan]{u.lang}[/] {u.text}", highlight=False)
            console.print(f"{'':14} [green]{args.to}[/] {u.translation}", highlight=False)
        if not utts:
            console.print("[yellow]no speech found in the input[/]")
        console.print(f"wrote {out} ({len(track) / rate:.1f} s) in {run_s:.1f} s "
                      f"(models loaded in {load_s:.1f} s)", highlight=False)
    return 0


def _cmd_devices(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from edge_rt.audio.devices import list_devices

    devices = list_devices(args.audio_backend)
    if args.json:
        print(json.dumps([d.__dict__ for d in devices], indent=2))
        return 0
    table = Table("index", "name", "host API", "in", "out", "default rate")
    for d in devices:
        table.add_row(str(d.index), d.name, d.hostapi, str(d.max_input_channels), str(d.max_output_channels),
                      f"{d.default_samplerate:.0f}")
    Console().print(table if devices else "no audio devices found (is a sound card or JACK server present?)")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import signal
    import threading

    from rich.console import Console

    from edge_rt.audio.devices import DeviceSink, DeviceSource
    from edge_rt.loop.captions import Captions
    from edge_rt.loop.endpoint import EndpointOptions
    from edge_rt.loop.loop import LoopOptions
    from edge_rt.loop.options import loudspeaker_mode
    from edge_rt.loop.trace import TraceWriter
    from edge_rt.pipeline import Pipeline

    console = Console(stderr=True)
    pipe = Pipeline.load(args.pack, _stage_options(args))
    _say_backend(console, pipe)
    source = DeviceSource(args.device_in, rate=args.rate_in, backend=args.audio_backend)
    sink = DeviceSink(args.device_out, rate=args.rate_out, backend=args.audio_backend)
    trace = TraceWriter(args.trace) if args.trace else None
    captions = Captions(_show_caption(Console()))
    spoken, languages = _sources(args.source)
    options = LoopOptions(target=args.to, source=spoken, languages=languages,
                          endpoint=EndpointOptions(hangover_ms=args.hangover_ms), turn=_turn_options(args),
                          barge_in=args.barge_in or "continue",
                          beam_size=args.beam, redecode=args.redecode, split=args.split,
                          noisy_preroll=args.noisy_preroll, sound_start=args.sound_start)
    if args.loudspeaker:
        options = loudspeaker_mode(options, args.barge_in, ready_tone=not args.no_ready_tone)
    recording = None
    if args.record:  # field test: session folder + flight recorder (edge_rt/ops/session.py)
        from edge_rt.ops.flight import FlightOptions
        from edge_rt.ops.session import Recording, live_header

        recording = Recording(args.record, live_header(args.pack, args.precision, args.threads, options, source, sink,
                                                       args.latency_budget_ms), sink,
                              flight=FlightOptions(latency_budget_ms=args.latency_budget_ms))
    observers = list(recording.observers) if recording else []
    metrics = None
    if args.metrics_port:
        from edge_rt.ops.metrics import Metrics

        metrics = Metrics()
        metrics.serve(args.metrics_port, args.metrics_bind)
        observers.append(metrics)
    loop = pipe.loop(source, recording.sink if recording else sink, options,
                     on_caption=captions, trace=trace, observers=observers)
    if options.redecode is not None and loop.redecode_off:  # TensorRT's decoder: one sequence, no beam
        console.print(f"[yellow]greedy decoding only (--redecode is not used here): {loop.redecode_off}[/]",
                      highlight=False)

    def stop(signum, frame):
        loop.stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    console.print(f"listening on [{source.info.index}] {source.info.name} ({source.rate} Hz), speaking "
                  f"{args.to} on [{sink.info.index}] {sink.info.name} ({sink.rate} Hz); Ctrl-C stops",
                  highlight=False)
    failure: list[Exception] = []

    def work():
        try:
            loop.run()
        except Exception as e:  # noqa: BLE001 - handed to the main thread: it reports and exits non-zero
            failure.append(e)

    worker = threading.Thread(target=work, name="edge-rt-loop")
    worker.start()
    while worker.is_alive():
        worker.join(0.2)  # the main thread stays free to take signals
    if metrics is not None:
        metrics.close()
    if trace:
        trace.close()
    if recording:
        recording.close()
        console.print(f"recorded to {recording.dir} (edge-rt replay / edge-rt report)", highlight=False)
    s = source.ring.stats
    console.print(f"stopped: {len(loop.traces)} utterances, capture overruns {s.overruns} "
                  f"({s.dropped} samples), playback underruns {sink.ring.stats.underruns}", highlight=False)
    if failure:  # the loop went down (a stage failing on utterance after utterance, the device gone): exit non-zero
        e, user = failure[0], isinstance(failure[0], EdgeRtError)
        why = str(e) if user else f"{type(e).__name__}: {e} ({loop.stage_errors} utterances dropped by stage errors)"
        print(f"edge-rt: error: the translation loop stopped: {why}", file=sys.stderr)
        return 2 if user else 1
    return 0
