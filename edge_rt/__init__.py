"""edge_rt: live speech-to-speech translation on device.

Build (``tools/build_engines.py``) and run (``edge-rt``) are separate programs;
this package only loads built packs and never downloads or builds on first use.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
