"""Dispatch: the ops of the protocol, one loaded driver per process, and the request loop."""

import json
import os
import platform
import sys
import traceback

from .gymnasium_driver import GymnasiumDriver
from .protocol import BRIDGE_VERSION, BridgeError, error_reply, requests, send, want_int
from .reasoning_gym_driver import ReasoningGymDriver
from .verifiers_driver import VerifiersDriver

DRIVERS = {"gymnasium": GymnasiumDriver, "reasoning_gym": ReasoningGymDriver, "verifiers": VerifiersDriver}
STATE = {"driver": None}


def need_driver():
    d = STATE["driver"]
    if d is None:
        raise BridgeError("ProtocolError", "no environment loaded; send load first")
    return d


def op_probe(req):
    import importlib.metadata as md

    pkgs = req.get("packages") or []
    if not isinstance(pkgs, list):
        raise BridgeError("ProtocolError", "probe: packages must be a list of names")
    versions = {}
    for p in pkgs:
        try:
            versions[str(p)] = md.version(str(p))
        except Exception:
            versions[str(p)] = None
    return {"python": platform.python_version(), "executable": sys.executable, "versions": versions}


def op_targets(req):
    """The environments a driver can load, sorted (for registry-wide conformance runs)."""
    name = req.get("driver")
    if name == "reasoning_gym":
        rg = ReasoningGymDriver._import()
        return sorted(n for n in rg.factory.DATASETS if n != "composite")
    if name == "gymnasium":
        return sorted(GymnasiumDriver._import().envs.registry)
    raise BridgeError("UnknownTarget", f"unknown bridge driver {json.dumps(name)}; known: {', '.join(DRIVERS)}")


def op_load(req):
    name = req.get("driver")
    if name not in DRIVERS:
        raise BridgeError("UnknownTarget", f"unknown bridge driver {json.dumps(name)}; known: {', '.join(DRIVERS)}")
    params = req.get("params") or {}
    if not isinstance(params, dict):
        raise BridgeError("ProtocolError", "load: params must be an object")
    old = STATE["driver"]
    if old is not None:
        old.close()
        STATE["driver"] = None
    d = DRIVERS[name]()
    result = d.load(req.get("target"), params)
    STATE["driver"] = d
    return result


def op_tasks(req):
    limit = want_int(req, "limit", None, "limit")
    return need_driver().tasks(limit)


def op_reset(req):
    task_id = req.get("task_id")
    if task_id is not None and not isinstance(task_id, (str, int)):
        raise BridgeError("InvalidParameter", "task_id must be a string or null")
    driver = need_driver()
    result = driver.reset(task_id, want_int(req, "seed", None, "seed"), req.get("want_task", True) is not False)
    if req.get("with_reference"):
        # Saves the host a round trip per episode; the host keeps it out of the observation.
        result["reference"] = driver.reference().get("action")
    return result


def op_step(req):
    if "action" not in req:
        raise BridgeError("ProtocolError", "step: missing 'action'")
    return need_driver().step(req["action"])


def op_judge(req):
    return need_driver().judge()


def op_reference(req):
    return need_driver().reference()


def op_random_action(req):
    return need_driver().random_action(want_int(req, "seed", None, "seed"))


def op_rollout(req):
    return need_driver().rollout(req)


OPS = {
    "probe": op_probe,
    "targets": op_targets,
    "load": op_load,
    "tasks": op_tasks,
    "reset": op_reset,
    "step": op_step,
    "judge": op_judge,
    "reference": op_reference,
    "random_action": op_random_action,
    "rollout": op_rollout,
}


def handle(line):
    """Returns (reply, exit_after)."""
    try:
        req = json.loads(line)
    except ValueError as e:
        return error_reply(None, "ProtocolError", f"request is not valid JSON: {e}"), False
    if not isinstance(req, dict):
        return error_reply(None, "ProtocolError", "request must be a JSON object"), False
    rid = req.get("id")
    op = req.get("op")
    if op == "close":
        d = STATE["driver"]
        if d is not None:
            try:
                d.close()
            except Exception:
                traceback.print_exc(file=sys.stderr)
        return {"id": rid, "ok": True, "result": {}}, True
    fn = OPS.get(op)
    if fn is None:
        return error_reply(rid, "ProtocolError", f"unknown op {json.dumps(op)}; known: {', '.join(list(OPS) + ['close'])}"), False
    try:
        # send() falls back to jsonable() when json.dumps refuses the result.
        return {"id": rid, "ok": True, "result": fn(req)}, False
    except BridgeError as e:
        return error_reply(rid, e.kind, e.message, **e.fields), False
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        return error_reply(rid, "EnvironmentError", f"{type(e).__name__}: {e}"), False


def main():
    send({"nenyax_bridge": BRIDGE_VERSION, "python": platform.python_version(), "pid": os.getpid()})
    for line in requests():
        if not line.strip():
            continue
        reply, stop = handle(line.decode("utf-8", "replace"))
        try:
            send(reply)
        except Exception as e:
            send(error_reply(reply.get("id"), "EnvironmentError", f"reply not encodable: {type(e).__name__}: {e}"))
        if stop:
            break
    sys.exit(0)

