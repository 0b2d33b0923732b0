"""A test web server run inside a sandbox: a preview whose every request that could change
something (any method but GET and HEAD) is appended to /tmp/changes, so what a forged
request achieved is on record. Its page makes one such request of its own. Standard
library only."""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = "/tmp/changes"
PAGE = b"""<!doctype html><html><head><title>victim</title></head><body><p id=out>waiting</p>
<script>
fetch('/note', {method: 'POST', body: 'own-page'}).then(
  (r) => { document.getElementById('out').textContent = 'own:' + r.status; },
  (e) => { document.getElementById('out').textContent = 'own-error:' + e; });
</script></body></html>"""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.reply(200, "text/html", PAGE)

    def change(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with open(LOG, "ab") as f:
            f.write(self.command.encode() + b" " + body.replace(b"\n", b" ") + b"\n")
        self.reply(200, "text/plain", b"noted\n")

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = change

    def reply(self, code, ctype, body):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
