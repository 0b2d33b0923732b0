package agent

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
)

// proxyTransport is shared so that connections to in-sandbox servers are reused.
var proxyTransport = &http.Transport{
	Proxy:               nil, // never send loopback traffic through an environment proxy
	MaxIdleConnsPerHost: 16,
	ForceAttemptHTTP2:   false,
}

// handleProxy forwards any request under /proxy/{port}/ to http://127.0.0.1:{port}/,
// streaming both ways; WebSocket upgrades are passed through by ReverseProxy.
func (s *Server) handleProxy(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid port "+strconv.Quote(r.PathValue("port")))
		return
	}
	target := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}
	// Keep the caller's escaping of the rest of the path (an encoded slash stays one).
	rawRest := strings.TrimPrefix(r.URL.EscapedPath(), "/proxy/"+r.PathValue("port"))
	if !strings.HasPrefix(rawRest, "/") {
		rawRest = "/" + rawRest
	}
	rest, err := url.PathUnescape(rawRest)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid path: "+err.Error())
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = rest
			pr.Out.URL.RawPath = rawRest
			pr.Out.URL.RawQuery = r.URL.RawQuery
			pr.Out.Host = pr.In.Host
			// The agent's token is for the agent, not for the sandbox's servers.
			pr.Out.Header.Del(TokenHeader)
			pr.SetXForwarded()
		},
		Transport:     proxyTransport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusBadGateway, CodeBadGateway, "port "+strconv.Itoa(port)+": "+err.Error())
		},
	}
	rp.ServeHTTP(w, r)
}
