"""Whisper ASR stage on the built packs: reference equality with faster-whisper, WER, guards."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import soundfile as sf

from edge_rt.errors import UnsupportedLanguageError
from edge_rt.backends.factory import OrtEngines
from edge_rt.measure.scoring import normalize, wer
from edge_rt.stages.asr.whisper import Asr, AsrOptions, DecodeStopped, Prompt
from edge_rt.stages.gain import GainOptions, apply_gain
from edge_rt.units import SAMPLE_RATE, bucket_frames
from edge_rt.stages.vad import SileroVad
from tests.stages.cuts import MID_SENTENCE, PAUSE, speech_end
from tests.whisper_reference import ct2_model_dir, raw_asr_files

WER_BAR = 0.07  # the bar for the default pack on the 12 English clips
# Clips compared token for token with faster-whisper: 6 English of every source, a
# 43-s German clip (two 30-s windows) and a French one.
EQUIVALENCE_IDS = (
    "en_jfk",
    "en_librispeech_1089-134686-0000",
    "en_librispeech_1995-1837-0001",
    "en_fleurs_1846",
    "en_fleurs_1728",
    "en_fleurs_luna",
    "de_fleurs_test_009",
    "fr_fleurs_test_005",
)


def _load(speech_dir, entry) -> np.ndarray:
    audio, sr = sf.read(speech_dir / entry["audio"], dtype="float32")
    assert sr == SAMPLE_RATE and audio.ndim == 1
    return audio


@pytest.fixture(scope="module")
def clips(speech_dir, speech_manifest) -> dict[str, tuple[dict, np.ndarray]]:
    return {m["id"]: (m, _load(speech_dir, m)) for m in speech_manifest}


@pytest.fixture(scope="module")
def asr(default_pack) -> Asr:
    return Asr.from_pack(default_pack, engines=OrtEngines(default_pack))


@pytest.fixture(scope="module")
def tiny_asr(tiny_pack) -> Asr:
    return Asr.from_pack(tiny_pack, engines=OrtEngines(tiny_pack))


@pytest.fixture(scope="module")
def results_30s(asr, clips, english_clips):
    """Our transcripts with every window forced to 30 s (faster-whisper's input), language given."""
    asr30 = asr.with_options(AsrOptions(bucket_s=30))
    ids = {m["id"] for m in english_clips} | set(EQUIVALENCE_IDS)
    return {i: asr30.transcribe(clips[i][1], language=clips[i][0]["lang"]) for i in sorted(ids)}


@pytest.fixture(scope="module")
def reference_model(default_pack, tmp_path_factory):
    from faster_whisper import WhisperModel

    files = raw_asr_files("default")
    model_dir = ct2_model_dir(files, default_pack.stage("asr")["dims"]["n_vocab"], tmp_path_factory.mktemp("fw"))
    return WhisperModel(str(model_dir), device="cpu", compute_type="float32", cpu_threads=2)


def _faster_whisper(model, audio: np.ndarray, language: str) -> tuple[list[int], str]:
    segments, _ = model.transcribe(
        audio,
        language=language,
        beam_size=1,
        temperature=0.0,
        without_timestamps=True,
        condition_on_previous_text=False,
        vad_filter=False,
    )
    segments = list(segments)
    return [t for s in segments for t in s.tokens], " ".join(s.text.strip() for s in segments if s.text.strip())


# A previous utterance to condition on (its last tokens; faster-whisper's initial_prompt).
PREVIOUS = "The cabbage juice changes color depending on how acidic or basic it is. Stuff it into you, his belly said."


def test_prompt_equals_faster_whisper_initial_prompt(reference_model, asr, clips):
    asr30 = asr.with_options(AsrOptions(bucket_s=30))
    for clip_id in ("en_librispeech_1089-134686-0001", "en_fleurs_1728"):
        meta, audio = clips[clip_id]
        segments, _ = reference_model.transcribe(audio, language="en", beam_size=1, temperature=0.0,
                                                 without_timestamps=True, condition_on_previous_text=False,
                                                 vad_filter=False, initial_prompt=PREVIOUS)
        ref_tokens = [t for s in segments for t in s.tokens]
        ours = asr30.transcribe(audio, language="en", prompt=PREVIOUS)
        plain = asr30.transcribe(audio, language="en")
        print(f"{clip_id}: prompted={ours.text!r} plain={plain.text!r}")
        assert list(ours.tokens) == ref_tokens, clip_id


def test_prompt_in_another_language_is_left_out(asr, clips):
    """English text before French speech makes Whisper copy the text: a Prompt names its language."""
    audio = clips["fr_fleurs_ski"][1]
    plain = asr.transcribe(audio)
    assert plain.language == "fr"
    assert asr.transcribe(audio, prompt=Prompt(PREVIOUS, "en")).tokens == plain.tokens
    assert asr.transcribe(audio, prompt=Prompt(PREVIOUS, "fr")).language == "fr"


def test_prompt_is_bounded_to_the_last_tokens(asr, clips):
    audio = clips["en_librispeech_1089-134691-0000"][1]
    long = " ".join([PREVIOUS] * 60)  # ~2000 tokens: more than the decoder cache holds
    steps = []
    step = asr._inference.step
    asr._inference.step = lambda token, offset: steps.append(offset) or step(token, offset)
    try:
        result = asr.transcribe(audio, language="en", prompt=long)
    finally:
        del asr._inference.step
    assert normalize(result.text) == "he could wait no longer"
    first_text = 1 + asr.options.max_prompt_tokens + 4  # <|startofprev|>, the prompt, the start sequence
    assert steps[:first_text] == list(range(first_text)) and max(steps) < first_text + len(result.tokens) + 1
    assert len(asr.tokenizer.previous_text(long, asr.options.max_prompt_tokens)) == asr.options.max_prompt_tokens


def test_a_detected_language_that_writes_nothing_is_followed_by_the_next_likeliest(asr, clips):
    """en_fleurs_luna as the live loop heard it with 320 ms of pre-roll (levelled): Whisper detects Hawaiian
    and writes only timestamp tokens though it hears speech; the clip came back empty. Decoded again among
    the other languages it is English, with words."""
    utterance = apply_gain(clips["en_fleurs_luna"][1][6144:44544], GainOptions())

    def task(lang):
        return "transcribe" if lang == "en" else "translate"  # the loop's route to another language

    once = asr.with_options(AsrOptions(retry_language=False)).transcribe(utterance, task=task)
    assert (once.language, once.text) == ("haw", "") and once.no_speech_prob < 0.1
    again = asr.transcribe(utterance, task=task)
    print(f"again: {again.language} {again.language_prob:.2f} {again.text!r}")
    assert again.language == "en" and any(c.isalpha() for c in again.text)
    assert asr.transcribe(utterance, task=task, language="haw").text == ""  # a language given is not second-guessed


def test_language_chooser_keeps_or_switches(asr, clips):
    audio = clips["de_fleurs_sinnvoll"][1]
    seen = []

    def keep_english(detected, probability, switch=0.85):
        seen.append((detected, probability))
        return detected if probability >= switch else "en"

    sure = asr.transcribe(audio, language=keep_english)
    assert seen[0][0] == "de" and seen[0][1] >= 0.85 and sure.language == "de"  # strong evidence: switch
    kept = asr.transcribe(audio, language=lambda d, p: keep_english(d, p, switch=1.01))
    assert kept.language == "en" and kept.language_prob == seen[0][1]
    with pytest.raises(UnsupportedLanguageError, match="chooser returned 'xx'"):
        asr.transcribe(audio, language=lambda d, p: "xx")


def test_greedy_output_equals_faster_whisper(reference_model, results_30s, clips):
    same = []
    for clip_id in EQUIVALENCE_IDS:
        meta, audio = clips[clip_id]
        ref_tokens, ref_text = _faster_whisper(reference_model, audio, meta["lang"])
        ours = results_30s[clip_id]
        print(f"{clip_id}: ours={ours.text!r}\n{'':>{len(clip_id)}}  ref ={ref_text!r}")
        if list(ours.tokens) == ref_tokens and ours.text == ref_text:
            same.append(clip_id)
    print(f"identical to faster-whisper: {len(same)}/{len(EQUIVALENCE_IDS)}")
    assert same == list(EQUIVALENCE_IDS)
    assert results_30s["de_fleurs_test_009"].windows == 2


# Clips under 30 s (one window): faster-whisper's seek after a window does not come into it.
TIMESTAMP_IDS = ("en_jfk", "en_librispeech_1089-134686-0000", "en_fleurs_1846", "en_fleurs_luna", "fr_fleurs_test_005")


def test_timestamp_decoding_equals_faster_whisper_with_timestamps(reference_model, asr, clips):
    """AsrOptions.timestamps: Whisper's timestamp rules, as CTranslate2 applies them for faster-whisper's
    default decode (without_timestamps=False): the same text tokens, and different ones from <|notimestamps|>."""
    asr30 = asr.with_options(AsrOptions(bucket_s=30, timestamps=True))
    eot = asr.tokenizer.special.eot
    differs = []
    for clip_id in TIMESTAMP_IDS:
        meta, audio = clips[clip_id]
        segments, _ = reference_model.transcribe(audio, language=meta["lang"], beam_size=1, temperature=0.0,
                                                 without_timestamps=False, condition_on_previous_text=False,
                                                 vad_filter=False)
        segments = list(segments)
        ref_tokens = [t for s in segments for t in s.tokens if t < eot]
        ours = asr30.transcribe(audio, language=meta["lang"])
        print(f"{clip_id}: ours={ours.text!r}\n{'':>{len(clip_id)}}  ref ={''.join(s.text for s in segments)!r}")
        assert list(ours.tokens) == ref_tokens, clip_id
        assert all(t < eot for t in ours.tokens)  # timestamps are left out of the text
        if ours.tokens != asr.with_options(AsrOptions(bucket_s=30)).transcribe(audio, language=meta["lang"]).tokens:
            differs.append(clip_id)
    assert differs, "timestamp decoding gave <|notimestamps|>'s tokens on every clip: is the option applied?"


def _wer_report(label: str, results, english_clips) -> float:
    refs = [m["text"] for m in english_clips]
    hyps = [results[m["id"]].text for m in english_clips]
    for m, h in zip(english_clips, hyps):
        clip_wer = wer([m["text"]], [h])
        if clip_wer:
            print(f"  {m['id']}: WER {clip_wer:.1%}  ref={normalize(m['text'])!r} hyp={normalize(h)!r}")
    score = wer(refs, hyps)
    print(f"WER {label}: {score:.2%} over {len(refs)} English clips")
    return score


def test_wer_english_smallest_bucket(asr, clips, english_clips):
    results = {m["id"]: asr.transcribe(clips[m["id"]][1], language="en") for m in english_clips}
    for m in english_clips:  # the smallest bucket that holds the clip
        frames = len(clips[m["id"]][1]) // 160
        assert results[m["id"]].bucket_s == min(b for b in asr.buckets_s if bucket_frames(b) >= frames)
    assert _wer_report("smallest bucket", results, english_clips) <= WER_BAR


def test_wer_english_int8_engines_the_runtime_uses_by_default(default_pack, clips, english_clips):
    """English WER with the engines the bench uses (INT8 where the build kept INT8) within the pack's bar.

    Was <= 6.5 % while the build kept the decoder in FP32 (5.58 %). The 2,197-word gate (issue 11) now
    keeps the INT8 decoder (its WER difference there: -0.96 points, interval under the 1-point limit);
    on these 215 words it measures 6.51 % (14 errors against FP32's 11): three words, inside the noise
    a 215-word set has, which is why the gate no longer decides on it."""
    asr8 = Asr.from_pack(default_pack, AsrOptions(precision="int8"), engines=OrtEngines(default_pack))
    assert "int8" in str(default_pack.model("asr", "encoder", "int8")), "the build kept no INT8 encoder"
    results = {m["id"]: asr8.transcribe(clips[m["id"]][1], language="en") for m in english_clips}
    assert _wer_report("int8 engines", results, english_clips) <= WER_BAR


def test_wer_english_30s_bucket(results_30s, english_clips):
    assert _wer_report("30-s bucket", results_30s, english_clips) <= WER_BAR


@pytest.mark.parametrize(
    "clip_id", ["en_fleurs_1904", "de_fleurs_sinnvoll", "es_fleurs_test_002", "fr_fleurs_ski", "zh_aishell1_BAC009S0764W0121"]
)
def test_detects_language(asr, clips, clip_id):
    meta, audio = clips[clip_id]
    result = asr.transcribe(audio)
    assert result.language == meta["lang"] and 0.5 < result.language_prob <= 1.0
    assert result.text


def test_translate_gives_english(asr, clips):
    de = asr.transcribe(clips["de_fleurs_sinnvoll"][1], task="translate")
    es = asr.transcribe(clips["es_fleurs_test_006"][1], language="es", task="translate")
    reference = clips["es_fleurs_test_006"][0]["translations"]["en"]
    print(f"de->en: {de.text} | es->en: {es.text} | es reference: {reference}")
    assert de.language == "de" and "fair" in normalize(de.text).split()
    assert "nicht" not in normalize(de.text)
    assert {"tribute", "luna"} <= set(normalize(es.text).split())
    assert all(ord(c) < 128 for c in de.text + es.text)
    german = asr.transcribe(clips["de_fleurs_sinnvoll"][1], language="de")
    assert "nicht" in normalize(german.text).split()


def test_tiny_english_only_pack_transcribes_jfk(tiny_asr, clips):
    meta, audio = clips["en_jfk"]
    result = tiny_asr.transcribe(audio)
    print("tiny.en:", result.text)
    assert not tiny_asr.multilingual and tiny_asr.languages == ("en",)
    assert normalize(result.text) == normalize(meta["text"])
    assert result.language == "en" and result.bucket_s == 15


def test_a_decode_stops_when_asked_and_runs_unchanged_when_not(tiny_asr, clips):
    """``stop`` is asked before the encoder, during it (from the run watcher's thread) and before
    every decoder step; answering False changes nothing."""
    _, audio = clips["en_jfk"]
    asked = []  # the decoding thread's questions (the watcher asks as often as the encoder run lasts)

    def stop_after(k: int):
        def stop() -> bool:
            if threading.current_thread() is threading.main_thread():
                asked.append(k)
            return len(asked) > k
        return stop

    plain = tiny_asr.transcribe(audio)
    never = tiny_asr.transcribe(audio, stop=stop_after(10_000))
    # before the encoder, before each token and <|endoftext|>
    assert never == plain and len(asked) == len(plain.tokens) + 2
    for k in (0, 1, 5):
        asked.clear()
        with pytest.raises(DecodeStopped):
            tiny_asr.transcribe(audio, stop=stop_after(k))
        assert len(asked) == k + 1
    assert tiny_asr.transcribe(audio) == plain  # a stopped decode leaves nothing behind


def test_an_encoder_run_is_interrupted_from_the_watcher_thread(tiny_asr, clips):
    """A pause that begins while the encoder runs stops it there (ONNX Runtime's RunOptions.terminate),
    not after it; the next decode is unaffected."""
    _, audio = clips["en_jfk"]
    plain = tiny_asr.transcribe(audio)
    by = []

    def stop() -> bool:  # says "stop" only when asked from inside the encoder run
        by.append(threading.current_thread().name)
        return by[-1] == "edge-rt-run-watcher"

    with pytest.raises(DecodeStopped, match="during the encoder"):
        tiny_asr.transcribe(audio, stop=stop)
    assert "edge-rt-run-watcher" in by
    assert tiny_asr.transcribe(audio) == plain


def test_unknown_language_and_task_are_rejected(asr, tiny_asr):
    audio = np.zeros(SAMPLE_RATE, np.float32)
    with pytest.raises(UnsupportedLanguageError, match=r"'xx'.*\ben\b.*\bde\b"):
        asr.transcribe(audio, language="xx")
    with pytest.raises(UnsupportedLanguageError, match="valid codes: en"):
        tiny_asr.transcribe(audio, language="de")
    with pytest.raises(UnsupportedLanguageError, match="English-only"):
        tiny_asr.transcribe(audio, task="translate")
    with pytest.raises(ValueError, match="task"):
        asr.transcribe(audio, task="summarize")
    assert len(asr.languages) == 99 and asr.multilingual


@pytest.mark.parametrize("pack", ["default", "tiny"])
def test_silence_gives_empty_text(asr, tiny_asr, pack):
    model = asr if pack == "default" else tiny_asr
    for audio in (np.zeros(5 * SAMPLE_RATE, np.float32), np.zeros(0, np.float32)):
        assert model.transcribe(audio).text == ""
    # Faint noise passes the digital-silence gate; Whisper's no-speech rule must drop it.
    noise = (np.random.default_rng(0).standard_normal(3 * SAMPLE_RATE) * 1e-3).astype(np.float32)
    result = model.transcribe(noise, language="en")
    assert result.text == "" and result.no_speech_prob > 0.6


def test_long_audio_uses_consecutive_windows_and_skips_digital_silence(asr, clips):
    meta, jfk = clips["en_jfk"]
    audio = np.concatenate([np.zeros(31 * SAMPLE_RATE, np.float32), jfk])  # 42 s: silent 30 s, then 12 s
    result = asr.transcribe(audio)
    assert result.windows == 2 and result.bucket_s == 15
    assert result.language == "en" and result.language_prob > 0.5
    assert normalize(result.text) == normalize(meta["text"])


def test_buffers_are_bound_once_per_bucket(asr, clips):
    inference = asr._inference
    k, v, logits = inference.self_k, inference.self_v, inference._logits
    audio = clips["en_librispeech_1089-134691-0000"][1]
    asr.transcribe(audio, language="en")
    bound = dict(inference._buckets)
    asr.transcribe(audio, language="en")
    assert inference.self_k is k and inference.self_v is v and inference._logits is logits
    assert inference._buckets.keys() == bound.keys()
    assert all(inference._buckets[b][0] is bound[b][0] for b in bound)  # the same mel buffer, re-filled


def test_options_are_validated(asr):
    with pytest.raises(ValueError, match="max_new_tokens"):
        AsrOptions(max_new_tokens=445)
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        AsrOptions(max_prompt_tokens=300)  # 1 + 300 + 4 + 224 > the 448-position cache
    assert AsrOptions(max_new_tokens=444, max_prompt_tokens=0).max_new_tokens == 444
    with pytest.raises(ValueError, match="precision"):
        AsrOptions(precision="fp16")
    with pytest.raises(ValueError, match="bucket"):
        asr.with_options(AsrOptions(bucket_s=7))


def test_a_short_window_is_encoded_at_its_own_size(asr, default_pack, clips, english_clips, monkeypatch):
    """What makes the 5-s bucket cheaper than the 30-s one, checked on shapes instead of a clock (speed is
    `edge-rt bench`'s): a 3-s window goes to the 5-s bucket, and the encoder graph runs at that size (250
    positions, a sixth of the 30-s window's 1500) instead of padding to 30 s."""
    import onnxruntime as ort

    inference = asr._inference
    encode, frames_seen = inference.encode, []
    monkeypatch.setattr(inference, "encode", lambda mel, stop=None: (frames_seen.append(mel.shape[-1]), encode(mel, stop))[1])
    speech = clips[english_clips[0]["id"]][1][: 3 * SAMPLE_RATE]
    result = asr.transcribe(speech, language="en")
    assert result.bucket_s == 5 and frames_seen and set(frames_seen) == {bucket_frames(5)}, frames_seen
    encoder = ort.InferenceSession(str(default_pack.model("asr", "encoder", "fp32")),
                                   providers=["CPUExecutionProvider"])
    for seconds in (5, 30):
        frames = bucket_frames(seconds)
        cross_k, cross_v = encoder.run(["cross_k", "cross_v"], {"mel": np.zeros((1, 80, frames), np.float32)})
        assert cross_k.shape[-1] == cross_v.shape[-2] == frames // 2, (seconds, cross_k.shape)


def test_repetition_loops_are_cut_to_one_copy():
    from edge_rt.stages.asr.decoding import repeated_tail

    block = list(range(100, 112))  # a 12-token sentence
    assert repeated_tail([1, 2, 3] + block + block) == len(block)
    assert repeated_tail([5, 6, 7, 7, 7]) == 2  # short blocks must repeat three times
    assert repeated_tail([5, 6, 7, 7]) == 0
    assert repeated_tail([1, 2, 3, 4, 1, 2, 3, 4]) == 0  # a short phrase said twice is speech
    assert repeated_tail([]) == 0


def test_german_clip_that_loops_greedily_is_cut(default_pack, speech_dir):
    from edge_rt.audio.files import read_audio
    from edge_rt.pipeline import StageOptions, load_stages
    from edge_rt.translate import TranslateOptions, translate_audio

    # Segmented by the live endpointer, this clip's last utterance made greedy decoding loop
    # ("Selbst ein großer Dinosaurier ... gewachsen." six times) before loops were cut.
    stages = load_stages(default_pack, StageOptions(precision="fp32"))
    audio = read_audio(speech_dir / "de_fleurs_test_001.wav")
    utts, _, _ = translate_audio(stages, audio, TranslateOptions(target="en", source="de"))
    text = " ".join(u.text for u in utts)
    sentences = [s.strip() for s in text.replace("?", ".").split(".") if s.strip()]
    assert "Dinosaurier" in text
    assert len(sentences) == len(set(sentences)), text


def test_end_mark_probability_tells_finished_sentences_from_cuts(asr, default_pack, clips, english_clips):
    """Whisper's P(sentence-final mark) where its text ends (the turn policy's evidence): high after a
    finished sentence, low after a cut at a word boundary inside one, though Whisper writes a period there too."""
    vad = SileroVad.from_pack(default_pack, engines=OrtEngines(default_pack))
    complete = []
    for m in english_clips:
        audio = clips[m["id"]][1]
        complete.append(asr.transcribe(np.concatenate([audio[: speech_end(vad, audio)], PAUSE])).end_mark_prob)
    mid = []
    for clip, seconds, _ in MID_SENTENCE:
        audio = clips[clip][1]
        mid.append(asr.transcribe(np.concatenate([audio[: round(seconds * SAMPLE_RATE)], PAUSE])).end_mark_prob)
    c, m = np.array(complete), np.array(mid)
    said = f"complete {np.round(c, 3).tolist()}, mid-sentence {np.round(m, 3).tolist()}"
    # Measured (2026-12, default pack INT8): complete 0.51-0.96, median 0.84 (lowest: the Luna clip,
    # "Fella resters also pay tribute to Luna."); mid-sentence 0.008-0.137, median 0.03. Tiny: the
    # same picture but for one cut Whisper ends in "It was nothing." (0.70).
    assert np.median(c) > 0.7 and (c > 0.5).mean() >= 0.8, said
    assert np.nanmedian(m) < 0.1 and (m < 0.3).mean() >= 0.9, said


def test_end_mark_probability_is_nan_without_a_verdict(asr):
    silent = asr.transcribe(np.zeros(SAMPLE_RATE, np.float32))
    assert silent.text == "" and np.isnan(silent.end_mark_prob)


def test_detection_among_given_languages_only():
    """detect_language over a subset: the softmax is taken over the candidates' tokens alone."""
    from edge_rt.stages.asr.decoding import Vocabulary, detect_language

    vocab = Vocabulary(eot=0, no_speech=1, language_ids=[10, 11, 12], languages=["en", "ar", "de"])
    logits = np.zeros(20, np.float32)
    logits[[10, 11, 12]] = [1.0, 3.0, 0.0]
    assert detect_language(logits, vocab)[0] == "ar"
    lang, p = detect_language(logits, vocab, ["en", "de"])
    assert lang == "en" and p == pytest.approx(np.e / (np.e + 1))


def test_languages_to_detect_among_are_checked(asr, tiny_asr, clips):
    audio = clips["en_jfk"][1][: 3 * SAMPLE_RATE]
    with pytest.raises(UnsupportedLanguageError, match="valid codes"):
        asr.transcribe(audio, languages=["en", "xx"])
    r = asr.transcribe(audio, languages=["de", "fr"])  # English speech, only German or French allowed
    assert r.language in ("de", "fr")
    assert tiny_asr.transcribe(audio, languages=["en"]).language == "en"  # English-only: nothing to choose
