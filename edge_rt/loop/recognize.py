"""One utterance (or the utterance so far, at a pause) into text and its translation.

Pure of loop state: the loop hands the captured samples, the stages and its options, and gets a
:class:`Hypothesis` back, which the end of the utterance may reuse (speculation).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple

import numpy as np

from edge_rt.errors import EdgeRtError
from edge_rt.loop.context import NONE, AsrContext
from edge_rt.loop.continuation import continuation
from edge_rt.loop.foreground import foreground_start
from edge_rt.loop.options import LoopOptions
from edge_rt.loop.phrase_cache import PhraseCache
from edge_rt.loop.repeats import said_once
from edge_rt.loop.split import cuts, sparse
from edge_rt.loop.stages import Stages
from edge_rt.measure.scoring import normalize
from edge_rt.stages.asr.tokenizer import has_words
from edge_rt.stages.gain import apply_gain
from edge_rt.stages.tts.voice import TtsAudio
from edge_rt.units import SAMPLE_RATE

__all__ = ["Hypothesis", "Resay", "asr_task", "level", "recognize", "route_task", "with_first_clause"]


@dataclass(frozen=True)
class Hypothesis:
    """The final text of an utterance up to ``end``, its translation, and when they were ready."""

    end: int  # capture sample index the hypothesis covers up to
    lang: str
    text: str  # in the source language; "" when only the translation was decoded (see source_pending)
    translation: str
    asr_ns: int
    mt_ns: int
    source_pending: bool = False  # Whisper translated directly: the source transcript comes after the audio
    # Speculation also synthesizes the first clause: (its audio, the rest of the clauses, not yet synthesized).
    speech: tuple[TtsAudio, Iterator[TtsAudio]] | None = None
    phrase: tuple | None = None  # its key in the phrase cache (PhraseCache.key), None: not cached
    end_mark_prob: float = float("nan")  # Whisper's P(sentence-final mark) where the text ends (AsrResult)
    redecoded: bool = False  # the words are a beam's, decoded again after an unsure greedy decode (redecode)
    split: bool = False  # the words are its pieces', decoded again after a sparse decode (split.py)
    lent: bool = False  # the words start in the dropped utterance before it (ContextOptions.lend_within_s)
    gated: bool = False  # no text because the unsure gate dropped the words Whisper wrote
    resaid: bool = False  # ``translation`` is the whole sentence's, with the utterance it went on with (Resay)
    whole: str = ""  # resaid on a transcribe route: the source text translated (the two utterances' text)
    tail: int = 0  # samples decoded after ``end`` (EndpointOptions.postroll_ms; set by the loop)
    held: bool = False  # decoded again in a held pause, with its tail (LoopOptions.held_postroll_ms; set by the loop)


class Resay(NamedTuple):
    """The utterance whose translation a barge-in held (``LoopOptions.barge_in`` "resay"), for the one that went on
    over it: its text (its source caption; "" while pending) and language, and the audio of the two together,
    levelled."""

    text: str
    lang: str
    audio: np.ndarray


def level(audio: np.ndarray, options: LoopOptions) -> np.ndarray:
    """Automatic gain: a quiet utterance reaches Whisper at speech level (see stages/gain.py)."""
    return audio if options.gain is None else apply_gain(audio, options.gain)


def asr_task(stages: Stages, target: str):
    """What Whisper's single pass is asked for: ``"transcribe"`` on an English-only model, else a
    function of the detected language that picks the route's task (transcribe or translate)."""
    if not stages.asr.multilingual:
        return "transcribe"

    def task_for(lang: str) -> str:
        try:
            return stages.route(lang, target).asr_task
        except EdgeRtError:
            return "transcribe"  # no route: stages.route raises with its message once the language is known

    return task_for


def route_task(task, lang: str) -> str:
    """What Whisper is asked for speech in ``lang``: ``task`` is :func:`asr_task`'s answer."""
    return task(lang) if callable(task) else task


def recognize(stages: Stages, options: LoopOptions, audio: np.ndarray, end: int, clock,
              context: AsrContext = NONE, phrases: PhraseCache | None = None,
              joint: np.ndarray | None = None, asr=None, redecode=None, lent: np.ndarray | None = None,
              resay: Resay | None = None) -> Hypothesis:
    """One Whisper pass (language detection picks transcribe or translate) + MT of ``audio``
    (float32 16 kHz, already levelled), which ends at capture sample ``end``; ``context`` is what
    the previous utterance lends (its language, its text: see context.py); a phrase in ``phrases``
    is not translated again. ``joint``: the previous utterance's audio and this one's, levelled
    (``context.joint`` says what the previous one said): decoded instead of ``audio``, and what
    follows the previous text is this utterance's text; when that cannot be told (another language,
    a translate route, a beginning that does not match, nothing after it) ``audio`` is decoded.

    When the utterance gives no words and it opened on a background quieter than its loudest talker (babble:
    the VAD hears speech from the start), it is decoded once more from where that talker starts
    (``options.foreground``, :mod:`edge_rt.loop.foreground`); the retry passes the same gates.

    ``lent``: the audio of an utterance the unsure gate dropped just before this one (``context.lent``) and this
    one's, levelled. When this utterance has words, ``lent`` is decoded too, and taken in its place when it passes
    the same gates, in the same language, and ends in this utterance's words with more before them
    (:func:`_lent`): the opening the gate dropped was the start of this sentence.

    On a translate route the source-language transcript is not on the critical path: the loop
    decodes it after the first translated clause is on its way (``source_pending``).

    ``asr``: the recognizer to decode with (the loop's beam-search view of ``stages.asr``); None: ``stages.asr``.
    ``redecode``: a beam-search view of it; a transcript heard with an average log-probability below
    ``options.redecode.below_logprob`` is decoded once more with it and the beam's words are taken unless they
    repeat themselves or drop most of greedy's (:func:`_take_beam`; the greedy decode has passed the gates: the
    beam's is not judged again). A translate route's decode is not. None: no
    second decode.

    A transcript (or translation) with too few tokens for the utterance's length (``options.split``: Whisper ended
    early) is decoded once more in pieces cut at the utterance's quietest moments, and their words are taken when
    there are clearly more of them (:func:`_pieces`, :mod:`edge_rt.loop.split`).

    ``resay``: the utterance whose translation this one talked over (:class:`Resay`). When this one has words in the
    same language, the translation is the two's together (:func:`_whole`), ``resaid`` says so, and the text stays
    this utterance's own.
    """
    asr = asr or stages.asr
    target = options.target
    task = asr_task(stages, target)
    kw = context.transcribe_kwargs(options.source, options.languages)

    def decode(recognizer, audio=audio, joint=joint):
        result = _joint(recognizer, options, joint, len(audio), context, task, kw) if joint is not None else None
        return result if result is not None else recognizer.transcribe(audio, task=task, **kw)

    first = decode(asr)
    heard = _heard(asr, options, context, audio, first, task)
    cut = None if heard or options.foreground is None else foreground_start(audio, options.foreground)
    if cut is not None:  # no words in the whole: once more from where its loudest talker starts (foreground.py)
        talker = audio[cut:]
        again = asr.transcribe(talker, task=task, **kw)
        heard_again = _heard(asr, options, context, talker, again, task)
        if heard_again:
            first, heard = again, heard_again
            audio, joint = talker, None  # a second decode (redecode) hears the talker too
    lent_taken = False
    if heard and lent is not None and context.joint is None:
        found = _lent(asr, options, context, lent, first, heard, task, kw)
        if found is not None:
            first, heard, lent_taken = found, found.text.strip(), True
            audio = lent  # a second decode (redecode, pieces) hears the opening too
    redecoded = split = False
    # Transcripts only: the limit was tuned on them, and a Whisper translation scores lower than a transcript of
    # the same speech (see _unsure_transcript), so most translated utterances would be decoded twice.
    if heard and redecode is not None and options.redecode is not None \
            and route_task(task, first.language) == "transcribe" \
            and first.avg_logprob < options.redecode.below_logprob:
        again = decode(redecode, audio, joint)
        if _take_beam(options, context, first, again):
            first, heard, redecoded = again, again.text.strip(), True
    if options.split is not None and (heard or options.split.empty) \
            and sparse(said := _tokens(asr, heard), len(audio), options.split):
        pieces = _pieces(asr, options, context, audio, first, said, task, kw)
        if pieces is not None:
            first, heard, split = pieces, pieces.text, True
    if not heard:
        now = clock.now_ns()
        return Hypothesis(end, first.language, "", "", now, now, gated=has_words(first.text))
    heard = said_once(heard, first.language, options.repeat_words)  # LoopOptions.repeat_words
    route = stages.route(first.language, target)
    translated = route.asr_task == "translate"
    whole = _whole(asr, options, resay, first.language, heard, route.asr_task) if resay is not None else None
    asr_ns = clock.now_ns()
    spoken = heard if whole is None else whole
    key = phrases.key(first.language, spoken, target) if phrases is not None else None
    if route.mt_pair and spoken:
        cached = phrases.translation(key) if phrases is not None else None
        if cached is not None:
            spoken = cached
        else:
            t0 = time.perf_counter()
            spoken = stages.mt.translate(spoken, *route.mt_pair)
            if phrases is not None:
                phrases.put_translation(key, spoken, (time.perf_counter() - t0) * 1000)
    elif phrases is not None:
        phrases.put_translation(key, spoken, 0.0)  # no MT on this route: the entry holds the first clause
    return Hypothesis(end, first.language, "" if translated else heard, spoken, asr_ns, clock.now_ns(),
                      source_pending=translated, phrase=key, end_mark_prob=first.end_mark_prob,
                      redecoded=redecoded, split=split, lent=lent_taken, resaid=whole is not None,
                      whole=whole if whole is not None and not translated else "")


def _whole(asr, options: LoopOptions, resay: Resay, lang: str, heard: str, task: str) -> str | None:
    """What is translated for an utterance that went on over ``resay``'s translation: on a transcribe route the two
    captions together; on a translate route Whisper's translation of the two's audio (one more pass; the source
    caption comes after the audio there). None when the languages differ or there is nothing to join."""
    if resay.lang != lang:
        return None
    if task != "translate":
        return said_once(f"{resay.text} {heard}", lang, options.repeat_words) if resay.text else None
    result = asr.transcribe(resay.audio, task="translate", language=lang)
    text = said_once(result.text.strip(), lang, options.repeat_words)
    return text if has_words(text) else None


def _heard(asr, options: LoopOptions, context: AsrContext, audio: np.ndarray, result, task) -> str:
    """``result``'s text, or "" when the unsure gate calls ``audio`` babble or noise, not speech to this device."""
    unsure = options.unsure
    # The babble rule is for speech out of nowhere. A fragment that follows speech within a few seconds (the
    # rest of a sentence after a hesitation, "Ask not" after "And so my fellow Americans") is short, so
    # Whisper is unsure of it as well: on the speech set the rule dropped such fragments (P(no speech)
    # 0.17-0.26, log-probability -1.0 to -1.6), while babble (-35 to -45 dBFS, six talkers) came as whole
    # utterances with nothing before them.
    beam = asr.options.beam_size > 1
    if (unsure is not None and not context.follows
            and result.no_speech_prob > unsure[0] and (beam or result.avg_logprob < unsure[1])
            and _unsure_transcript(asr, audio, result, task, unsure, beam)):
        return ""
    return result.text.strip()


def _take_beam(options: LoopOptions, context: AsrContext, greedy, beam) -> bool:
    """Whether the beam's decode of an utterance is taken over greedy's (``options.redecode``): it says something,
    in the same language, repeats nothing greedy does not, and keeps at least ``min_kept`` of greedy's words."""
    o = options.redecode
    if not beam.text.strip() or beam.language != greedy.language:
        return False
    if _repeats(options, context, beam, o.repeat_words) and not _repeats(options, context, greedy, o.repeat_words):
        return False
    return len(_words(beam)) >= o.min_kept * len(_words(greedy))


def _pieces(asr, options: LoopOptions, context: AsrContext, audio: np.ndarray, whole, said: int, task, kw: dict):
    """``audio`` decoded again in pieces cut at its quietest moments (``options.split``, :mod:`edge_rt.loop.split`):
    a result whose text joins the pieces' kept texts, or None when they say nothing, do not hold ``min_gain`` times
    ``said``, the tokens of ``whole``'s kept text (0 when the gates dropped it), repeat themselves where ``whole``
    does not, or were heard in different languages. Each piece passes the gates (Whisper's no-speech rule, the
    unsure gate) on its own: a piece of background says nothing.

    Each piece detects its language as ``whole`` did (``kw``): a decode that ended early can be a detection gone
    wrong too (en_fleurs_1728 in 10 dB babble: Vietnamese at probability 0.19, "The"; its pieces English at 0.97 and
    more), and the result is in the pieces' language, so the route follows them."""
    o = options.split
    bounds = [0, *cuts(audio, o), len(audio)]
    if len(bounds) < 3:
        return None
    texts, results = [], []
    for a, b in zip(bounds, bounds[1:]):
        piece = asr.transcribe(audio[a:b], task=task, **kw)
        results.append(piece)
        if text := _heard(asr, options, context, audio[a:b], piece, task):
            texts.append(text)
    if len({r.language for r in results}) > 1:
        return None
    text = " ".join(texts)
    tokens = _tokens(asr, text)
    if not tokens or tokens < o.min_gain * said:
        return None
    joined = replace(whole, text=text, language=results[0].language,
                     language_prob=min(r.language_prob for r in results),
                     avg_logprob=min(r.avg_logprob for r in results), end_mark_prob=results[-1].end_mark_prob)
    if _repeats(options, context, joined, o.repeat_words) and not _repeats(options, context, whole, o.repeat_words):
        return None
    return joined


def _tokens(asr, text: str) -> int:
    """Whisper text tokens of ``text`` (as the decoder writes it, after a space)."""
    return len(asr.tokenizer.encode(" " + text)) if text else 0


def _words(result) -> list[str]:
    return [w for w in (normalize(w, result.language) for w in result.text.split()) if w]


def _repeats(options: LoopOptions, context: AsrContext, result, block: int) -> bool:
    """Whether ``result``'s words say something twice: ``block`` (RedecodeOptions/SplitOptions.repeat_words) or more
    words right after themselves, or, for a follow-up, the previous utterance's text again at its start. A beam can:
    tiny.en wrote JFK's "And so my fellow American. And so my fellow American." where greedy wrote it once; a speaker
    seldom repeats three words in a row, and a second decode that does is not taken over a first that does not."""
    words = _words(result)
    n = len(words)
    if any(words[i:i + k] == words[i + k:i + 2 * k] for k in range(block, n // 2 + 1) for i in range(n - 2 * k + 1)):
        return True
    return context.joint is not None and _after_known(options, context, result.text, result.language) is not None


def _unsure_transcript(asr, audio: np.ndarray, first, task, unsure: tuple[float, float], beam: bool) -> bool:
    """Whether the unsure gate's log-probability test holds for what Whisper *transcribes* of ``audio``, greedily.

    The limit was tuned on greedy transcripts (tools/tune_unsure.py). A translation scores lower than a
    transcript of the same speech: fr_fleurs_test_003, a French sentence translated into English, came out
    at P(no speech) 0.15 and -1.27 and was dropped, while its transcript scores -0.71 (the whole clip).
    A beam's best hypothesis scores higher than greedy's: with a beam of 5, the faint six-talker babble of
    tests/test_robustness_input.py passed the gate ("He hoped there would be"). So on a translate route,
    and after a beam decode, the utterance is transcribed once more, greedily (only here, at the gate's
    edge: P(no speech) above its limit) and that transcript is judged; P(no speech) comes before the task
    token and is the same for every decode of the audio."""
    if route_task(task, first.language) != "translate" and not beam:
        return True
    greedy = asr.with_options(replace(asr.options, beam_size=1)) if beam else asr
    check = greedy.transcribe(audio, task="transcribe", language=first.language)
    return check.avg_logprob < unsure[1]


def _joint(asr, options: LoopOptions, audio: np.ndarray, samples: int, context: AsrContext, task, kw: dict):
    """Whisper on ``audio``, the previous utterance's audio and this one's (``samples`` long); the result
    with only the text after the previous text, or None when that text cannot be told apart (see
    :func:`recognize`)."""
    known, o = context.joint, options.context
    if known is None:
        return None
    result = asr.transcribe(audio, task=task, **kw)
    if result.language != known.lang or route_task(task, result.language) != "transcribe":
        return None
    # The first half written twice across the pause ("Do you have this shirt? Do you have this shirt? and a larger
    # size."): said once before the cut, so that the continuation is what follows it (LoopOptions.repeat_words).
    once = said_once(result.text, result.language, options.repeat_words)
    found = _after_known(options, context, once, result.language)
    if found is None or len(found.text.split()) < max(1.0, o.joint_min_words_per_s * samples / SAMPLE_RATE):
        return None
    return replace(result, text=found.text)


def _lent(asr, options: LoopOptions, context: AsrContext, audio: np.ndarray, alone, heard: str, task, kw: dict):
    """Whisper on ``audio`` (a dropped utterance's audio and this one's): its result when that passes the gates, is
    a transcript in ``alone``'s language and ends in ``heard`` (``alone``'s kept text; at most ``joint_max_cost`` word
    edits per word, the test joint decoding makes at the other end) with words before it; else None."""
    if route_task(task, alone.language) != "transcribe":
        return None
    result = asr.transcribe(audio, task=task, **kw)
    text = _heard(asr, options, context, audio, result, task)
    if not text or result.language != alone.language:
        return None
    found = continuation(_reversed(heard), _reversed(text), result.language)
    if found is None or found.cost > options.context.joint_max_cost or not has_words(found.text):
        return None
    return replace(result, text=text)


def _reversed(text: str) -> str:
    return " ".join(reversed(text.split()))


def _after_known(options: LoopOptions, context: AsrContext, text: str, lang: str):
    """What follows the previous utterance's text (``context.joint``) at the start of ``text``, or None when
    ``text`` does not start with it (more than ``joint_max_cost`` edits per known word)."""
    found = continuation(context.joint.text, text, lang)
    return found if found is not None and found.cost <= options.context.joint_max_cost else None


def with_first_clause(hyp: Hypothesis, tts, target: str, *, rate: float = 1.0,
                      phrases: PhraseCache | None = None) -> Hypothesis:
    """``hyp`` with its first clause synthesized at ``rate`` (or taken from ``phrases``), so a pause
    that becomes the end starts playing at once; the other clauses are synthesized only if it does.
    Raises what the synthesizer raises."""
    if not has_words(hyp.translation):
        return hyp
    if phrases is not None and (first := phrases.first_clause(hyp.phrase, hyp.translation, rate)) is not None:
        return replace(hyp, speech=(first, iter(tts.clauses(hyp.translation, target, rate=rate, skip=1))))
    t0 = time.perf_counter()
    clauses = iter(tts.clauses(hyp.translation, target, rate=rate))
    first = next(clauses, None)
    if first is None:
        return hyp
    if phrases is not None:
        ms = (time.perf_counter() - t0) * 1000
        if first.last:
            phrases.put_first_clause(hyp.phrase, hyp.translation, first, rate, ms)
        else:  # a streamed clause: cached whole once its last chunk is synthesized
            clauses = _caching_first_clause(first, clauses, phrases, hyp, rate, ms)
    return replace(hyp, speech=(first, clauses))


def _caching_first_clause(first, rest: Iterator, phrases: PhraseCache, hyp: Hypothesis, rate: float,
                          ms: float) -> Iterator:
    """``rest`` as it is; once the chunks of ``first``'s clause are all synthesized, the clause's whole
    audio goes into ``phrases`` (a hit then speaks it and synthesizes from the next clause on)."""
    parts: list | None = [first.samples]
    while True:
        t0 = time.perf_counter()
        chunk = next(rest, None)
        if chunk is None:
            return
        if parts is not None and chunk.clause == first.clause:
            ms += (time.perf_counter() - t0) * 1000
            parts.append(chunk.samples)
            if chunk.last:
                whole = replace(first, samples=np.concatenate(parts), last=True)
                phrases.put_first_clause(hyp.phrase, hyp.translation, whole, rate, ms)
                parts = None
        yield chunk
