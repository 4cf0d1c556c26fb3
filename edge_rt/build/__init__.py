"""The offline build: acquire pinned wheels, export ONNX, write a manifest.

The runtime never imports this package.
"""
