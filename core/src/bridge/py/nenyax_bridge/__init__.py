"""nenyax's Python bridge, protocol version 1 (docs/bridge.md).

The library writes this package to its cache directory and starts `python -u -m nenyax_bridge`;
the worker speaks one JSON object per line on stdin/stdout. Importing the package does nothing
else: standard library only at top level, and gymnasium, reasoning_gym, verifiers and numpy are
imported lazily by the drivers that need them.
"""
