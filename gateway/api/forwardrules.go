package api

import (
	"mime"
	"net/http"
	"net/textproto"
	"strings"
)

// The forwarding rules, as the lean forward (forward.go) applies them. httputil and
// Caddy's reverse_proxy, the gateway's other forwarders, apply the same rules in their
// own code; package forwardtest holds them as one table that every forwarder is tested
// against, so a forwarder that breaks one fails there:
//
//   - hop-by-hop headers (and every header a Connection header names) are dropped both
//     ways; TE goes up only as "trailers";
//   - X-Forwarded-For, -Host and -Proto are the gateway's (writeLeanRequest);
//   - an answer of unknown length, or an event stream, is flushed at every write;
//   - 1xx answers go on to the client before the final answer;
//   - trailers go on, announced ones as announced, others with http.TrailerPrefix;
//   - an upgrade is never taken by the lean forward (leanForward.handles): httputil
//     or Caddy relays it.

// hopHeaders are the hop-by-hop headers a proxy drops (httputil's list).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders drops h's hop-by-hop headers and those its Connection header names.
func removeHopHeaders(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, f := range hopHeaders {
		delete(h, f)
	}
}

// skippedRequestHeaders are not copied from the client's request: hop-by-hop headers,
// and the forwarding headers the gateway writes itself.
var skippedRequestHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true,
	"Host": true, "Content-Length": true,
}

// flushesAtOnce reports whether res is a stream whose every write goes out at once (as
// httputil: SSE, a body of unknown length).
func flushesAtOnce(res *http.Response) bool {
	if res.ContentLength == -1 {
		return true
	}
	ct := strings.TrimLeft(res.Header.Get("Content-Type"), " \t")
	// Only a text/ type can be text/event-stream: any other (JSON above all) is not
	// parsed, which would cost a map per answer.
	if len(ct) < len("text/") || !strings.EqualFold(ct[:len("text/")], "text/") {
		return false
	}
	base, _, _ := mime.ParseMediaType(ct)
	return base == "text/event-stream"
}

// passInformational sends a 1xx answer (103 Early Hints and the like) on to the client
// with its own headers, leaving w's headers for the final answer as they were.
func passInformational(w http.ResponseWriter, res *http.Response) {
	h := w.Header()
	saved := h.Clone()
	for k, vv := range res.Header {
		h[k] = vv
	}
	w.WriteHeader(res.StatusCode)
	clear(h)
	for k, vv := range saved {
		h[k] = vv
	}
}

// copyAnswerHeader copies res's header into dst but for the hop-by-hop headers, and
// announces res's trailers; it returns how many it announced (copyTrailers).
func copyAnswerHeader(dst http.Header, res *http.Response) (announced int) {
	removeHopHeaders(res.Header)
	for k, vv := range res.Header {
		if prev, ok := dst[k]; ok {
			dst[k] = append(prev, vv...)
		} else {
			dst[k] = vv // res is ours alone: its values need no copy
		}
	}
	announced = len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		dst.Add("Trailer", strings.Join(keys, ", "))
	}
	return announced
}

// copyTrailers passes res's trailers on once its body has been copied: as announced
// when they are the ones copyAnswerHeader announced, else each with
// http.TrailerPrefix (net/http sends those as trailers unannounced).
func copyTrailers(w http.ResponseWriter, res *http.Response, announced int) {
	if len(res.Trailer) == 0 {
		return
	}
	_ = http.NewResponseController(w).Flush()
	dst := w.Header()
	if len(res.Trailer) == announced {
		for k, vv := range res.Trailer {
			dst[k] = append(dst[k], vv...)
		}
		return
	}
	for k, vv := range res.Trailer {
		for _, v := range vv {
			dst.Add(http.TrailerPrefix+k, v)
		}
	}
}

// teTrailers reports whether TE values hold the token "trailers" (as httputil
// compares: the whole comma-separated element, without parameters).
func teTrailers(values []string) bool {
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), "trailers") {
				return true
			}
		}
	}
	return false
}
