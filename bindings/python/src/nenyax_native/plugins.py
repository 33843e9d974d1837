"""Library plugins (docs/plugins-abi.md): load a plugin library, register a C plugin, list them.

A plugin library exports ``nenyax_plugin_entry`` itself (libnenyax does not), and a judge plugin
is then picked by spec: ``{"type": "plugin", "use": "<name>"}`` wherever a judge is accepted.
Plugin callbacks run on library worker threads, so a registered plugin must be native code (a
descriptor built with cffi pointing at C functions), not Python callables.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

from ._native import call_json, check, ffi, lib

PLUGIN_ABI_VERSION: int = int(lib.NENYAX_PLUGIN_ABI_VERSION)
JUDGE_VTABLE_VERSION: int = int(lib.NENYAX_JUDGE_VTABLE_VERSION)
LEARNER_PLUGIN_VTABLE_VERSION: int = int(lib.NENYAX_LEARNER_PLUGIN_VTABLE_VERSION)


def plugin_load(path: str | os.PathLike[str]) -> None:
    """Load a plugin library and register the plugins its nenyax_plugin_entry lists."""
    data = os.fsencode(path)
    check(lib.nenyax_plugin_load(data, len(data)))


def plugin_register(descriptor: Any) -> None:
    """Register a ``nenyax_plugin_t *`` (a cffi pointer); it is copied, its user_data must live on."""
    check(lib.nenyax_plugin_register(ffi.NULL if descriptor is None else descriptor))


def plugins() -> List[Dict[str, Any]]:
    """The plugins loaded or registered so far: [{"kind", "name", "version", "source"}]."""
    return call_json(lib.nenyax_plugins_json)


def plugin_check(kind: str, name: str) -> Dict[str, Any]:
    """Hold a plugin to its kind's conformance checks (``nenyax plugin-check``): the report when it
    conforms; raises the library's error (status CONFIG, every failed check named) when not."""
    k, n = kind.encode("utf-8"), name.encode("utf-8")
    return call_json(lib.nenyax_plugin_check, k, len(k), n, len(n))
