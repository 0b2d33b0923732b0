package testenv

// DNSZoneScript is a DNS server a test runs in a container of its own (python3 -c
// DNSZoneScript ADDRESS): it answers allowed.sandgate-test. with ADDRESS and
// denied.sandgate-test. with 192.0.2.1 (only data: no packet goes there), NXDOMAIN for
// every other name, on UDP and TCP 53 and on UDP 5353. It prints "ready" once it
// listens and "asked NAME" for every query, so the test sees in the container's log
// what reached it.
const DNSZoneScript = `import socket, struct, sys, threading
zone = {'allowed.sandgate-test': sys.argv[1], 'denied.sandgate-test': '192.0.2.1'}
def answer(q):
    i, labels = 12, []
    while q[i] != 0:
        labels.append(q[i + 1:i + 1 + q[i]].decode()); i += q[i] + 1
    i += 5
    name = '.'.join(labels).lower()
    print('asked', name, flush=True)
    if name in zone:
        hdr = q[:2] + struct.pack('>HHHHH', 0x8580, 1, 1, 0, 0)
        return hdr + q[12:i] + b'\xc0\x0c' + struct.pack('>HHIH', 1, 1, 60, 4) + socket.inet_aton(zone[name])
    return q[:2] + struct.pack('>HHHHH', 0x8583, 1, 0, 0, 0) + q[12:i]
def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', port))
    while True:
        q, a = s.recvfrom(4096)
        try:
            s.sendto(answer(q), a)
        except Exception:
            pass
def tcp():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 53)); s.listen(16)
    while True:
        c, _ = s.accept()
        try:
            n = struct.unpack('>H', c.recv(2))[0]; q = b''
            while len(q) < n:
                q += c.recv(n - len(q))
            r = answer(q); c.sendall(struct.pack('>H', len(r)) + r)
        except Exception:
            pass
        c.close()
for f, a in ((udp, (53,)), (udp, (5353,)), (tcp, ())):
    threading.Thread(target=f, args=a, daemon=True).start()
print('ready', flush=True)
threading.Event().wait()
`
