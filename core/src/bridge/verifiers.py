# nenyax Python bridge: the Verifiers driver (rollout mode). Appended to bridge.py at build time
# (see SCRIPT in core/src/bridge/mod.rs), so everything bridge.py defines is in scope here.
