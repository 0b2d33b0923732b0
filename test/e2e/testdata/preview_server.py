"""A test web server run inside a sandbox: a page whose script opens a WebSocket, SSE,
a hashing upload sink, a streaming echo of a body as it arrives, a WebSocket echo and a
header echo. Standard library only."""
import base64, hashlib, json, socket, struct, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = b"""<!doctype html><html><head><title>preview</title></head><body><p id=out>waiting</p>
<script>
const u = new URL('ws', location.href); u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
const ws = new WebSocket(u);
ws.onopen = () => ws.send('ping');
ws.onmessage = (e) => { document.getElementById('out').textContent = 'echo:' + e.data; };
ws.onerror = () => { document.getElementById('out').textContent = 'ws-error'; };
</script></body></html>"""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes: without this, delayed ACKs add 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path in ("/", "/index.html"):
            self.reply(200, "text/html", PAGE)
        elif path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(3):
                self.wfile.write(("data: %d %f\n\n" % (i, time.time())).encode())
                self.wfile.flush()
                time.sleep(0.5)
            self.close_connection = True
        elif path == "/headers":
            self.reply(200, "application/json", json.dumps({"path": self.path, "headers": dict(self.headers)}).encode())
        elif path.endswith("/ws") or path == "/ws":
            self.websocket()
        else:
            self.reply(404, "text/plain", b"no such page\n")

    def do_POST(self):
        path = self.path.split("?")[0]
        if path == "/duplex":
            self.duplex()
            return
        if path != "/upload":
            self.reply(404, "text/plain", b"no\n")
            return
        h, n = hashlib.sha256(), 0
        for chunk in self.body_parts():
            h.update(chunk); n += len(chunk)
        self.reply(200, "application/json", json.dumps({"sha256": h.hexdigest(), "bytes": n}).encode())

    def body_parts(self):
        """The request's body, part by part as it arrives (chunked or of a known length)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return
                left = size
                while left:
                    chunk = self.rfile.read(min(left, 1 << 20))
                    if not chunk:
                        return
                    left -= len(chunk)
                    yield chunk
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                chunk = self.rfile.read1(min(left, 1 << 20))
                if not chunk:
                    return
                left -= len(chunk)
                yield chunk

    def duplex(self):
        """Answers before reading anything, then sends back each part of the body as it
        arrives: a server that streams while it reads."""
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for chunk in self.body_parts():
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def reply(self, code, ctype, body):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        rf, wf = self.rfile, self.wfile
        while True:
            head = rf.read(2)
            if len(head) < 2:
                break
            opcode, length = head[0] & 0x0F, head[1] & 0x7F
            if length == 126:
                length = struct.unpack(">H", rf.read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", rf.read(8))[0]
            mask = rf.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(rf.read(length)))
            if opcode == 8:
                wf.write(b"\x88\x00"); wf.flush()
                break
            if opcode == 9:
                opcode = 10
            out = bytes([0x80 | opcode])
            if len(data) < 126:
                out += bytes([len(data)])
            elif len(data) < 65536:
                out += bytes([126]) + struct.pack(">H", len(data))
            else:
                out += bytes([127]) + struct.pack(">Q", len(data))
            wf.write(out + data); wf.flush()
        self.close_connection = True


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
