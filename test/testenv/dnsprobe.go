package testenv

// DNSProbeScript sends one query (qtype A or PTR) to server:port over udp or tcp (argv: server
// port name qtype proto) and prints "rcode=N an=M ips…", or "error <kind>" when nothing answers.
const DNSProbeScript = `import sys, socket, struct, random
server, port, name, qtype, proto = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
qt = {'A': 1, 'PTR': 12}[qtype]
q = struct.pack('>HHHHHH', random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\x00' + struct.pack('>HH', qt, 1)
try:
    if proto == 'udp':
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(q, (server, port)); r = s.recv(4096)
    else:
        s = socket.create_connection((server, port), timeout=3); s.sendall(struct.pack('>H', len(q)) + q)
        n = struct.unpack('>H', s.recv(2))[0]; r = b''
        while len(r) < n:
            r += s.recv(n - len(r))
except Exception as e:
    print('error', type(e).__name__); sys.exit(0)
an = struct.unpack('>H', r[6:8])[0]
i = 12
while r[i] != 0:
    i += r[i] + 1
i += 5
ips = []
for _ in range(an):
    if r[i] & 0xc0 == 0xc0:
        i += 2
    else:
        while r[i] != 0:
            i += r[i] + 1
        i += 1
    t, c, ttl, l = struct.unpack('>HHIH', r[i:i + 10]); i += 10
    if t == 1:
        ips.append(socket.inet_ntoa(r[i:i + 4]))
    i += l
print(('rcode=%d an=%d ' % (r[3] & 15, an)) + ' '.join(ips))
`
