"""``telemetry=`` on ``run``: the library's OTLP sink posts one episode span per trajectory and a
chat span per model call, at the calls' recorded start times, to a receiver (here a local HTTP
server taking OTLP/JSON); a bad sink name is a typed error before any episode runs."""

import http.server
import json
import threading

import nenyax_native as nx
import pytest


@pytest.fixture()
def receiver():
    got = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", got
    server.shutdown()


def spans(got):
    return [
        span
        for path, body in got
        if path == "/v1/traces"
        for rs in body["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]


def test_run_with_otel_telemetry_sends_episode_and_call_spans(receiver):
    url, got = receiver
    model = nx.FunctionModel(lambda messages: "<answer>1</answer>")
    sink = {"name": "otel", "endpoint": url, "protocol": "http/json", "service_name": "binding-test"}
    trajs = nx.run("builtin:arithmetic?size=5", model, n=6, concurrency=2, telemetry=[sink])
    assert len(trajs) == 6
    # The run's hub is finished (flushed) when the call returns.
    names = [s["name"] for s in spans(got)]
    assert sum(n.startswith("episode builtin:arithmetic") for n in names) == 6
    chats = [s for s in spans(got) if s["name"].startswith("chat ")]
    assert len(chats) == sum(len(t.model_calls) for t in trajs) == 6
    starts = sorted(int(s["startTimeUnixNano"]) for s in chats)
    recorded = sorted(round(c["started_at"] * 1e9) for t in trajs for c in t.to_dict()["model_calls"])
    assert all(abs(a - b) < 2_000 for a, b in zip(starts, recorded, strict=True))


def test_a_sink_name_alone_and_bad_names(receiver):
    with pytest.raises(nx.errors.ConfigError, match="unknown telemetry sink"):
        nx.run("builtin:arithmetic?size=5", lambda obs: "1", n=1, telemetry=["nope"])
