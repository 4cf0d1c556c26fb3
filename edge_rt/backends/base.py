"""The small protocol every stage talks to, whatever runs the graph."""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

import numpy as np


class Engine(Protocol):
    """One compiled graph with named inputs and outputs.

    Stages depend on this protocol only, never on ONNX Runtime or TensorRT.
    """

    @property
    def input_names(self) -> Sequence[str]: ...

    @property
    def output_names(self) -> Sequence[str]: ...

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; returns every output by name."""
        ...
