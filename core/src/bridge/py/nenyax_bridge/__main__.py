"""The worker's entry point: `python -u -m nenyax_bridge`."""

import os

from . import protocol


def _forget_own_path():
    """The host puts this package's directory first on PYTHONPATH; take it off again so that
    the programs environments start see the environment the host was given."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if parts and parts[0] and os.path.abspath(parts[0]) == here:
        rest = os.pathsep.join(parts[1:])
        if rest:
            os.environ["PYTHONPATH"] = rest
        else:
            del os.environ["PYTHONPATH"]


if __name__ == "__main__":
    # Before anything can print: importing the drivers may already write to stdout.
    protocol.open_channel()
    _forget_own_path()
    from .dispatch import main

    main()
