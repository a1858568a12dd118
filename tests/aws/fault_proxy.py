#!/usr/bin/env python3
"""A fault-injecting HTTP proxy in front of the AWS emulator (test code). It forwards every
request unchanged, except that among ECS RunTask calls every Nth is answered with a
ThrottlingException and every Mth with a capacity failure, as Fargate does under load, and
every Kth is forwarded (the task starts) but its answer is lost (the client sees a 500). The
client token of every RunTask is recorded, so a test can check that a retried launch reuses it
(ECS starts one task per token; the emulator does not deduplicate)."""
import argparse
import http.client
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

counts = {"run_task": 0, "throttled": 0, "capacity": 0, "lost": 0, "tokens": [], "ops": {}}


def op_name(method, path, headers):
    """`service.Operation` of a request, for counting API calls."""
    target = headers.get("X-Amz-Target", "")
    if target:
        service, op = target.split(".", 1)
        service = {"DynamoDB_20120810": "dynamodb", "AmazonEC2ContainerServiceV20141113": "ecs", "secretsmanager": "secretsmanager"}.get(service, service)
        return f"{service}.{op}"
    query = path.split("?", 1)[1] if "?" in path else ""
    if method == "GET":
        return "s3.ListObjectsV2" if "list-type" in query else "s3.GetObject"
    if method == "PUT":
        return "s3.UploadPart" if "partNumber" in query else "s3.PutObject"
    if method == "HEAD":
        return "s3.HeadObject"
    return f"s3.{method}"
lock = threading.Lock()


def make_handler(target, throttle_every, capacity_every, lose_every, stats):
    t = urlparse(target)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _reply(self, status, body, ctype="application/x-amz-json-1.1"):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-amzn-RequestId", "fault-proxy")
            self.end_headers()
            self.wfile.write(data)

        def _forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with lock:
                op = op_name(self.command, self.path, self.headers)
                counts["ops"][op] = counts["ops"].get(op, 0) + 1
            fault = None
            if self.headers.get("X-Amz-Target", "").endswith(".RunTask"):
                with lock:
                    counts["run_task"] += 1
                    n = counts["run_task"]
                    if throttle_every and n % throttle_every == 0:
                        counts["throttled"] += 1
                        fault = "throttle"
                    elif capacity_every and n % capacity_every == 0:
                        counts["capacity"] += 1
                        fault = "capacity"
                    elif lose_every and n % lose_every == 0:
                        counts["lost"] += 1
                        fault = "lose"
                    token = json.loads(body or b"{}").get("clientToken", "")
                    counts["tokens"].append([token, fault or "ok"])
                if fault == "throttle":
                    return self._reply(400, {"__type": "ThrottlingException", "message": "Rate exceeded"})
                if fault == "capacity":
                    return self._reply(200, {"tasks": [], "failures": [{"reason": "Capacity is unavailable at this time. Please try again later."}]})
            conn = http.client.HTTPConnection(t.hostname, t.port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if fault == "lose":
                conn.close()
                return self._reply(500, {"__type": "InternalFailure", "message": "the answer was lost"})
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            # A HEAD answer has no body but the length of the object it describes.
            length = resp.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

    return Handler


def main():
    p = argparse.ArgumentParser()
    # 0 (the default) lets the system pick a free port, printed on the first stdout line: no
    # window in which another process can take a port chosen in advance.
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--target", required=True)
    p.add_argument("--throttle-every", type=int, default=0)
    p.add_argument("--capacity-every", type=int, default=0)
    p.add_argument("--lose-every", type=int, default=0)
    p.add_argument("--stats")
    a = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(a.target, a.throttle_every, a.capacity_every, a.lose_every, a.stats))
    print(server.server_address[1], flush=True)
    if a.stats:
        def dump():
            while True:
                with lock:
                    data = json.dumps(counts)
                with open(a.stats + ".tmp", "w") as f:
                    f.write(data)
                os.replace(a.stats + ".tmp", a.stats)
                time.sleep(0.2)
        threading.Thread(target=dump, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
