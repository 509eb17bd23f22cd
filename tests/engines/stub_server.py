"""A tiny engine for the launcher tests: `python stub_server.py PORT OPTIONS_JSON`.

Options: `lines` printed first (a "\\r" in one makes two lines), `env` names variables to
print as NAME=value, `exit` ends it with that code before serving, `delay` seconds
before serving (negative: never serves), `models` false answers 404 at /v1/models.
On a GPU: `cuda_mib` allocated by the server, `escaped_cuda_mib` by a worker that leaves
the process group (setsid) and prints "escaped PID".
"""

import http.server
import json
import os
import subprocess
import sys
import time

HOLD = "import sys, time, torch; x = torch.empty({} << 20, dtype=torch.uint8, device='cuda')\n"
HOLD += "print('holding', flush=True); time.sleep(600)"

port, options = int(sys.argv[1]), json.loads(sys.argv[2])
for line in options.get("lines", []):
    sys.stdout.write(line + "\n")
for name in options.get("env", []):
    sys.stdout.write(f"{name}={os.environ.get(name)}\n")
sys.stdout.flush()
if options.get("cuda_mib"):
    import torch

    held = torch.empty(options["cuda_mib"] << 20, dtype=torch.uint8, device="cuda")
if options.get("escaped_cuda_mib"):
    code = HOLD.format(options["escaped_cuda_mib"])
    worker = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    worker.stdout.readline()
    print(f"escaped {worker.pid}", flush=True)
if "exit" in options:
    sys.stderr.write("stub: fatal error while loading\n")
    sys.exit(options["exit"])
delay = options.get("delay", 0)
if delay < 0:
    time.sleep(600)
time.sleep(delay)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/health" or (self.path == "/v1/models" and options.get("models", True))
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b'{"data": []}' if ok else b"")

    def log_message(self, *args):
        print("request", self.path, flush=True)


http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
