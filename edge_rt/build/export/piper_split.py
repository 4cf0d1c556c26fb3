"""Piper's graph in two: the prior (phonemes -> latent frames) and the vocoder (latent frames -> waveform).

A VITS voice computes, for one sentence, a latent ``z [1, channels, frames]`` (text encoder,
duration predictor, flow: ~1/3 of the time) and then the waveform from it with a HiFi-GAN
decoder (``/dec/...``, ~2/3 of the time, ``hop`` samples per frame). The decoder is a stack of
convolutions, so a window of frames with some context on each side gives the same samples as the
whole sentence does (measured: within 1e-6 inside a sentence with 16 frames of context). Split, the
runtime runs the prior once per sentence and the vocoder a window at a time, and speech starts after
the prior and one short window instead of after the whole sentence (stages/tts/vocoder.py).

The cut is the decoder's input: the first input of ``/dec/conv_pre/Conv``, the node name every
Piper export has (piper's VITS export through torch.onnx). A graph without it, or a multi-speaker one
(its decoder also reads the speaker embedding), is not split and the runtime speaks whole sentences.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx
import onnx.utils

__all__ = ["VoiceParts", "split_voice", "DECODER_ENTRY", "LATENT"]

DECODER_ENTRY = "/dec/conv_pre/Conv"  # the vocoder's first node
LATENT = "z"  # the tensor between the two parts, renamed from the export's "/Mul_..._output_0"


class VoiceParts(NamedTuple):
    prior: onnx.ModelProto  # input, input_lengths, scales -> z [batch, channels, frames]
    vocoder: onnx.ModelProto  # z [1, channels, frames] -> output [1, 1, 1, frames * hop]
    channels: int
    hop: int  # waveform samples per latent frame


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if x == old else x for x in node.input]
        node.output[:] = [new if x == old else x for x in node.output]
    for v in (*graph.input, *graph.output, *graph.value_info):
        if v.name == old:
            v.name = new


def _set_dims(value: onnx.ValueInfoProto, dims: list) -> None:
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        else:
            dim.dim_value = int(d)


def _channels(model: onnx.ModelProto) -> int:
    """Input channels of the decoder's first convolution (its weight is [out, in, k])."""
    node = next(n for n in model.graph.node if n.name == DECODER_ENTRY)
    weight = next(t for t in model.graph.initializer if t.name == node.input[1])
    return int(weight.dims[1])


def _hop(vocoder: onnx.ModelProto) -> int:
    """Samples per latent frame: the product of the decoder's upsampling strides."""
    hop = 1
    for node in vocoder.graph.node:
        if node.op_type == "ConvTranspose":
            strides = next((list(a.ints) for a in node.attribute if a.name == "strides"), [1])
            hop *= int(np.prod(strides))
    return hop


def split_voice(model: onnx.ModelProto) -> VoiceParts | None:
    """The prior and vocoder of a single-speaker Piper graph; None when it cannot be cut (see the module doc)."""
    graph = model.graph
    entry = next((n for n in graph.node if n.name == DECODER_ENTRY), None)
    inputs = [i.name for i in graph.input]
    if entry is None or "sid" in inputs or [o.name for o in graph.output] != ["output"]:
        return None
    cut = entry.input[0]
    extractor = onnx.utils.Extractor(model)
    prior = extractor.extract_model(inputs, [cut])
    vocoder = extractor.extract_model([cut], ["output"])
    if {i.name for i in vocoder.graph.input} != {cut}:  # the decoder reads more than the latent
        return None
    channels = _channels(model)
    for part in (prior, vocoder):
        _rename(part.graph, cut, LATENT)
        del part.graph.value_info[:]  # stale shapes of the whole graph's symbols; the runtime reads the i/o only
    _set_dims(prior.graph.output[0], ["batch_size", channels, "frames"])
    _set_dims(vocoder.graph.input[0], [1, channels, "frames"])
    _set_dims(vocoder.graph.output[0], [1, 1, 1, "samples"])
    return VoiceParts(prior, vocoder, channels, _hop(vocoder))
