"""A STAND-IN for `sglang.launch_server` / `vllm serve` in test_engine_e2e.py (no engine, no model): it
answers /health, SGLang's /generate and vLLM's /v1/completions on 127.0.0.1 with a deterministic
"greedy" continuation of each prompt, and, as arfuse's plugin would with ARFUSE_SGLANG / ARFUSE_VLLM
set, prints the INFO line and writes counters to ARFUSE_PLUGIN_COUNTERS. STANDIN_WARN=1 makes it print
a WARN instead (the plugin could not serve). Stops on SIGINT/SIGTERM."""
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def continuation(prompt, n):
    words = prompt.split()
    return " " + " ".join(words[i % len(words)][::-1] for i in range(n))


def main():
    engine, port = sys.argv[1], int(sys.argv[2])
    plugin = os.environ.get("ARFUSE_SGLANG" if engine == "sglang" else "ARFUSE_VLLM") == "1"
    if plugin:
        if os.environ.get("STANDIN_WARN") == "1":
            print(f"[rank0] arfuse WARN {engine} 0.0: arfuse not used, the engine keeps its own all-reduce and norm: "
                  f"stand-in", flush=True)
        else:
            print(f"[rank0] arfuse INFO {engine}: fused AR+RMSNorm on tp group (2 ranks, stand-in)", flush=True)
            folder = os.environ["ARFUSE_PLUGIN_COUNTERS"]
            with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
                json.dump({f"{engine}/tp/arfuse": 7}, f)

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send({}) if self.path == "/health" else self.send_error(404)

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/generate" and engine == "sglang":
                n = req["sampling_params"]["max_new_tokens"]
                self._send([{"text": continuation(t, n), "meta_info": {"completion_tokens": n}} for t in req["text"]])
            elif self.path == "/v1/completions" and engine == "vllm":
                n = req["max_tokens"]
                self._send({"choices": [{"index": i, "text": continuation(t, n)} for i, t in enumerate(req["prompt"])],
                            "usage": {"completion_tokens": n * len(req["prompt"])}})
            else:
                self.send_error(404)

    server = HTTPServer(("127.0.0.1", port), H)
    signal.signal(signal.SIGINT, lambda *a: sys.exit(0))
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
