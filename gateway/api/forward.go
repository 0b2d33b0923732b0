package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"syscall"
	"time"
)

// forwardBufferSize is the size of the buffers NewForward copies bodies through: one
// per proxied request in flight, reused (without a pool httputil allocates 32 KiB per
// request, garbage at the next GC).
const forwardBufferSize = 32 << 10

// bufferPool lends NewForward its copy buffers (httputil.BufferPool). It pools each
// buffer's *[]byte: leanForward takes and returns those (get, put), while httputil's
// Put of a bare slice costs a new one.
type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte { return *p.get() }

func (p *bufferPool) Put(b []byte) {
	if cap(b) < forwardBufferSize {
		return
	}
	b = b[:forwardBufferSize]
	p.put(&b)
}

// get lends a buffer, returned with put.
func (p *bufferPool) get() *[]byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, forwardBufferSize)
	return &b
}

func (p *bufferPool) put(b *[]byte) { p.pool.Put(b) }

var forwardBuffers = &bufferPool{}

// Limits of the lean forward's keep-alive connections, as NewForward's http.Transport has them.
const (
	leanIdlePerHost = 64
	leanIdleTimeout = 90 * time.Second
	leanDialTimeout = 5 * time.Second
)

// leanForward forwards a request without a body (GET, HEAD: most of a preview's
// traffic) in the handler's own goroutine, on a keep-alive HTTP/1.1 connection of its
// own pool. It does what httputil.ReverseProxy with NewForward's Rewrite and an
// http.Transport do for such a request (hop-by-hop headers dropped both ways, the
// client's X-Forwarded-* replaced by ours, no User-Agent or Accept-Encoding added,
// 1xx passed on, streams flushed at every write, trailers passed on), and no more: no
// clone of the request, no copy of the answer's headers, and none of the transport's
// hand-offs between the handler and a connection's reader and writer goroutines
// (their wake-ups cost more CPU than the rest of the request: BenchmarkPreviewInProcess).
//
// A connection is reused only after its answer was read to the end, and is taken out
// of the pool for each request, so that no two requests ever share one. A request that
// fails on a reused connection before any answer arrives is sent again on a new one:
// the upstream closed the idle connection meanwhile (GET and HEAD are idempotent).
type leanForward struct {
	onError func(w http.ResponseWriter, r *http.Request, err error)
	dialer  net.Dialer

	mu    sync.Mutex
	idle  map[string][]*leanConn // by upstream address, most recently used last
	sweep *time.Timer            // closes connections idle past leanIdleTimeout
}

// leanConn is one keep-alive connection to an upstream.
type leanConn struct {
	conn    net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer
	addr    string
	idledAt time.Time
	// breakOff makes a blocked read or write of conn return at once: made with the
	// connection, not a closure per request.
	breakOff func()
}

func newLeanForward(onError func(w http.ResponseWriter, r *http.Request, err error)) *leanForward {
	return &leanForward{
		onError: onError,
		dialer:  net.Dialer{Timeout: leanDialTimeout, KeepAlive: 30 * time.Second},
		idle:    map[string][]*leanConn{},
	}
}

// handles reports whether r is a request the lean forward takes: GET or HEAD without
// a body, not an upgrade, with no upstream secret to add (agent calls) and a query that
// httputil would send unchanged. Every other request goes through httputil.
func (f *leanForward) handles(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	// A server's request of length 0 has no body (its Body may still be a reader, as
	// Caddy's idle-timeout wrapper of an empty one; -1 is a length not known).
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return false
	}
	if _, ok := r.Header["Upgrade"]; ok {
		return false
	}
	if secrets, ok := r.Context().Value(upstreamSecretsKey{}).(http.Header); ok && len(secrets) > 0 {
		return false
	}
	return cleanQuery(r.URL.RawQuery)
}

// cleanQuery reports whether httputil would send query as it is (its cleanQueryParams
// re-encodes a query holding ';' or a malformed escape).
func cleanQuery(q string) bool {
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// errLeanUpgrade is a 101 answer to a request that asked for no upgrade.
var errLeanUpgrade = errors.New("the sandbox switched protocols without being asked to")

// serve forwards r to upstream and copies the answer to w.
func (f *leanForward) serve(w http.ResponseWriter, r *http.Request, upstream string) {
	for attempt := 0; ; attempt++ {
		retry, err := f.try(w, r, upstream, attempt == 0)
		if err == nil {
			return
		}
		if !retry {
			f.onError(w, r, err)
			return
		}
	}
}

// try is one attempt of serve. It answers no error once the answer's head has come:
// a failure after that aborts the answer (the client sees it cut off). retry says the
// request failed on a reused connection before any answer, and may go again.
func (f *leanForward) try(w http.ResponseWriter, r *http.Request, upstream string, first bool) (retry bool, _ error) {
	ctx := r.Context()
	lc, reused, err := f.get(ctx, upstream)
	if err != nil {
		return false, err
	}
	// The client going away breaks the upstream connection off (a slow answer, a stream).
	stop := context.AfterFunc(ctx, lc.breakOff)
	res, informational, err := lc.roundTrip(w, r)
	if err != nil {
		stop()
		lc.close()
		return first && reused && informational == 0 && ctx.Err() == nil && closedIdle(err), err
	}
	announced := copyAnswerHeader(w.Header(), res)
	w.WriteHeader(res.StatusCode)
	err = copyBody(w, res, flushesAtOnce(res))
	if !stop() || err != nil || res.Close {
		lc.close()
	} else {
		f.put(lc)
	}
	if err != nil {
		panic(http.ErrAbortHandler) // as httputil does
	}
	copyTrailers(w, res, announced)
	return false, nil
}

// closedIdle reports whether err is what a request meets on a connection the upstream
// closed while it was idle.
func closedIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// copyBody copies res's body to w through a pooled buffer, flushing after every write
// when flush; it reports an error of either side (the body read to its end is nil).
func copyBody(w http.ResponseWriter, res *http.Response, flush bool) error {
	bp := forwardBuffers.get()
	defer forwardBuffers.put(bp)
	buf := *bp
	var rc *http.ResponseController
	if flush {
		rc = http.NewResponseController(w)
	}
	for {
		n, rerr := res.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if flush {
				if err := rc.Flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// get takes an idle connection to addr, or dials one; reused says which.
func (f *leanForward) get(ctx context.Context, addr string) (*leanConn, bool, error) {
	now := time.Now()
	f.mu.Lock()
	for conns := f.idle[addr]; len(conns) > 0; conns = f.idle[addr] {
		lc := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		f.idle[addr] = conns[:len(conns)-1]
		if now.Sub(lc.idledAt) < leanIdleTimeout && lc.br.Buffered() == 0 {
			f.mu.Unlock()
			return lc, true, nil
		}
		lc.close() // stale, or the upstream said something unasked
	}
	f.mu.Unlock()
	conn, err := f.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	lc := &leanConn{conn: conn, br: bufio.NewReaderSize(conn, 4<<10), bw: bufio.NewWriterSize(conn, 4<<10), addr: addr}
	lc.breakOff = func() { _ = conn.SetDeadline(aLongTimeAgo) }
	return lc, false, nil
}

// put makes lc idle for the next request to its address.
func (f *leanForward) put(lc *leanConn) {
	lc.idledAt = time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	conns := f.idle[lc.addr]
	if len(conns) >= leanIdlePerHost {
		lc.close()
		return
	}
	f.idle[lc.addr] = append(conns, lc)
	if f.sweep == nil {
		f.sweep = time.AfterFunc(leanIdleTimeout, f.sweepIdle)
	}
}

// sweepIdle closes the connections idle past leanIdleTimeout and forgets addresses
// without any; it runs again while some are left.
func (f *leanForward) sweepIdle() {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for addr, conns := range f.idle {
		kept := conns[:0]
		for _, lc := range conns {
			if now.Sub(lc.idledAt) < leanIdleTimeout {
				kept = append(kept, lc)
			} else {
				lc.close()
			}
		}
		clear(conns[len(kept):])
		if len(kept) == 0 {
			delete(f.idle, addr)
		} else {
			f.idle[addr] = kept
		}
	}
	f.sweep = nil
	if len(f.idle) > 0 {
		f.sweep = time.AfterFunc(leanIdleTimeout, f.sweepIdle)
	}
}

func (lc *leanConn) close() { _ = lc.conn.Close() }

// aLongTimeAgo, as a deadline, makes a blocked read or write return at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes r on lc and reads the answer's head, passing 1xx answers on to w
// (informational counts them).
func (lc *leanConn) roundTrip(w http.ResponseWriter, r *http.Request) (_ *http.Response, informational int, _ error) {
	writeLeanRequest(lc.bw, r)
	if err := lc.bw.Flush(); err != nil {
		return nil, 0, err
	}
	for ; ; informational++ {
		res, err := http.ReadResponse(lc.br, r)
		if err != nil {
			return nil, informational, err
		}
		switch {
		case res.StatusCode == http.StatusSwitchingProtocols:
			return nil, informational, errLeanUpgrade
		case res.StatusCode >= 200:
			return res, informational, nil
		case informational >= 5:
			return nil, informational, fmt.Errorf("the sandbox sent more than 5 informational answers")
		}
		passInformational(w, res)
	}
}

// headerValueFixer makes a header value one line, as net/http writes it.
var headerValueFixer = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ")

// writeLeanRequest writes r's head as httputil with NewForward's Rewrite would send it:
// the client's headers but the hop-by-hop ones (and those its Connection header names),
// TE only as "trailers", and X-Forwarded-For, -Host and -Proto of the gateway's own.
func writeLeanRequest(bw *bufio.Writer, r *http.Request) {
	uri := r.URL.RequestURI()
	if uri == "" || uri[0] != '/' {
		uri = "/" + strings.TrimPrefix(uri, "*")
	}
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(uri)
	host := r.Host
	if strings.ContainsAny(host, "\r\n") {
		host = headerValueFixer.Replace(host)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	var named []string // headers the client's Connection header names, also dropped
	for _, f := range r.Header["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				named = append(named, textproto.CanonicalMIMEHeaderKey(sf))
			}
		}
	}
	for k, vv := range r.Header {
		if skippedRequestHeaders[k] || (len(named) > 0 && contains(named, k)) {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			if strings.ContainsAny(v, "\r\n") {
				v = headerValueFixer.Replace(v)
			}
			bw.WriteString(strings.TrimSpace(v))
			bw.WriteString("\r\n")
		}
	}
	if teTrailers(r.Header["Te"]) {
		bw.WriteString("Te: trailers\r\n")
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		bw.WriteString("X-Forwarded-For: ")
		bw.WriteString(ip)
		bw.WriteString("\r\n")
	}
	bw.WriteString("X-Forwarded-Host: ")
	bw.WriteString(host)
	if r.TLS == nil {
		bw.WriteString("\r\nX-Forwarded-Proto: http\r\n\r\n")
	} else {
		bw.WriteString("\r\nX-Forwarded-Proto: https\r\n\r\n")
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
