"""The machine-translation stage: text in one language -> text in another (Bergamot Marian students).

Usage::

    pack = BuiltPack.load("default")
    mt = Translator.from_pack(pack, engines=OrtEngines(pack))  # every pair in the pack, on the CPU
    mt.translate("Where is the station?", "en", "pt")   # -> "Onde fica a estação?"

Text is split into sentences (:mod:`edge_rt.stages.mt.text`), each sentence is
translated greedily by :class:`~edge_rt.stages.mt.marian.MarianDirection`, and the
results are joined in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from edge_rt.errors import UnsupportedLanguageError
from edge_rt.pack import PRECISIONS, BuiltPack
from edge_rt.stages.mt.marian import MarianDirection
from edge_rt.stages.mt.marian_io import TIED_EMBEDDING
from edge_rt.stages.mt.shortlist import LexicalShortlist
from edge_rt.stages.mt.text import join_sentences, split_sentences

if TYPE_CHECKING:
    from edge_rt.backends.factory import EngineFactory

__all__ = ["MtOptions", "Translator", "pairs_into"]


@dataclass(frozen=True)
class MtOptions:
    """How the MT stage runs."""

    precision: str = "fp32"  # "fp32" | "int8": falls back to fp32 where the pack has no int8 twin
    threads: int = 1  # ONNX Runtime intra-op threads per session (the graphs are small; 1 is fastest per core)
    max_length_factor: float | None = None  # target tokens per source token; None: the pack's (2.5)
    shortlist: bool = True  # restrict output to the lexical shortlist, as Bergamot does (if the pack has one)
    pairs: tuple[str, ...] | None = None  # load only these "src-tgt" pairs; None: all in the pack


def _verify_options(o: MtOptions) -> None:
    if o.precision not in PRECISIONS:
        raise ValueError(f"MtOptions.precision must be one of {PRECISIONS}, not {o.precision!r}")
    if not isinstance(o.threads, int) or o.threads < 1:
        raise ValueError(f"MtOptions.threads must be a positive int, not {o.threads!r}")
    if o.max_length_factor is not None and not o.max_length_factor > 0:
        raise ValueError(f"MtOptions.max_length_factor must be > 0 or None, not {o.max_length_factor!r}")
    if o.pairs is not None and (isinstance(o.pairs, str) or not all(isinstance(p, str) for p in o.pairs)):
        raise ValueError(f'MtOptions.pairs must be a tuple like ("en-pt",), not {o.pairs!r}')


def pairs_into(pack: BuiltPack, target: str) -> tuple[str, ...]:
    """The pack's pairs that translate into ``target``: the only ones a loop speaking ``target`` can use
    (:func:`edge_rt.route.plan_route` takes ``source-target`` or, after Whisper's translate task,
    ``en-target``). ``MtOptions(pairs=pairs_into(pack, "pt"))`` leaves pt->en unloaded: 56 MB less RSS and
    0.44 s less CPU at load with the default pack. Empty when no pair does (Whisper's translate task alone)."""
    return tuple(p for p in pack.stage("mt")["pairs"] if p.split("-")[1] == target)


class Translator:
    """Translate text between the language pairs of a built pack.

    Build it with :meth:`from_pack`; the engines and buffers of every pair are
    allocated there, so :meth:`translate` only runs them.
    """

    def __init__(self, directions: dict[str, MarianDirection]):
        self._directions = dict(directions)

    @classmethod
    def from_pack(cls, pack: BuiltPack, options: MtOptions = MtOptions(), *, engines: "EngineFactory") -> "Translator":
        """Load the ``mt`` stage of ``pack`` on the engines ``engines`` builds (see ``edge_rt/build/export/marian.py``
        for its manifest and :mod:`edge_rt.backends.factory` for the engines)."""
        _verify_options(options)
        entry = pack.stage("mt")
        available = tuple(entry["pairs"])
        wanted = available if options.pairs is None else tuple(options.pairs)
        missing = [p for p in wanted if p not in available]
        if missing:
            raise UnsupportedLanguageError(
                f"model pack '{pack.name}' cannot translate {missing}; its pairs are {list(available)}"
            )
        factor = options.max_length_factor or float(entry.get("max_length_factor", 2.5))
        directions = {}
        for pair in wanted:
            shortlist = None
            if options.shortlist and f"{pair}/shortlist" in entry.get("assets", {}):
                shortlist = LexicalShortlist.load(pack.asset("mt", f"{pair}/shortlist"))
            load = lambda part: engines.load("mt", f"{pair}/{part}", precision=options.precision,  # noqa: E731
                                             threads=options.threads, shared=(TIED_EMBEDDING,))
            directions[pair] = MarianDirection(
                encoder=load("encoder"),
                decoder=load("decoder"),
                vocab=pack.asset("mt", f"{pair}/vocab"),
                buckets=tuple(int(b) for b in entry["src_buckets"]),
                max_length_factor=factor,
                shortlist=shortlist,
            )
        return cls(directions)

    @property
    def pairs(self) -> tuple[str, ...]:
        """Loaded pairs as ``"src-tgt"`` language codes, e.g. ``("en-pt", "pt-en")``."""
        return tuple(self._directions)

    def direction(self, src: str, tgt: str) -> MarianDirection:
        """The model for ``src -> tgt``; raises :class:`UnsupportedLanguageError` naming the pairs."""
        pair = f"{src}-{tgt}"
        if pair not in self._directions:
            raise UnsupportedLanguageError(
                f"no translation model for {src!r} -> {tgt!r}; available pairs: {list(self.pairs)}"
            )
        return self._directions[pair]

    def translate(self, text: str, src: str, tgt: str) -> str:
        """Translate ``text`` (any number of sentences and lines) from ``src`` to ``tgt``.

        Empty or blank text gives ``""``. Sentences are translated one by one and
        joined with a space; line breaks are kept.
        """
        direction = self.direction(src, tgt)
        if not text or not text.strip():
            return ""
        lines = [[direction.translate(s) for s in sentences] for sentences in split_sentences(text)]
        return join_sentences(lines)
