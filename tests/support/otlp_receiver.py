"""An OTLP/HTTP receiver for tests: decodes what it is sent with the real opentelemetry-proto
messages (protobuf, or OTLP JSON with its hex ids) and appends one JSON line per request to
OUT: {"path", "content_type", "request": <MessageToDict of the Export*ServiceRequest>}.

Usage: python otlp_receiver.py PORT OUT
"""

import base64
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

KINDS = {
    "/v1/traces": trace_service_pb2.ExportTraceServiceRequest,
    "/v1/metrics": metrics_service_pb2.ExportMetricsServiceRequest,
}


def hex_ids_to_base64(v):
    """OTLP JSON writes ids as hex; the protobuf JSON mapping reads bytes as base64."""
    if isinstance(v, dict):
        return {
            k: base64.b64encode(bytes.fromhex(x)).decode()
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(x, str)
            else hex_ids_to_base64(x)
            for k, x in v.items()
        }
    if isinstance(v, list):
        return [hex_ids_to_base64(x) for x in v]
    return v


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        kind = KINDS.get(self.path)
        if kind is None:
            self.send_response(404)
            self.end_headers()
            return
        ctype = self.headers.get("Content-Type", "")
        msg = kind()
        try:
            if ctype == "application/x-protobuf":
                msg.ParseFromString(body)
            elif ctype == "application/json":
                json_format.ParseDict(hex_ids_to_base64(json.loads(body)), msg)
            else:
                raise ValueError(f"unsupported content type {ctype}")
        except Exception as e:  # the sender's mistake: answer 400 with why
            self.send_response(400)
            self.end_headers()
            self.wfile.write(str(e).encode())
            return
        line = {
            "path": self.path,
            "content_type": ctype,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "request": json_format.MessageToDict(msg),
        }
        with open(sys.argv[2], "a") as f:
            f.write(json.dumps(line) + "\n")
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()
