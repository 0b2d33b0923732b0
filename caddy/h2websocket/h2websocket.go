// Package h2websocket lets clients open WebSockets over HTTP/2 (RFC 8441, extended
// CONNECT). Caddy's reverse proxy already turns such a stream into an HTTP/1.1 upgrade
// towards the sandbox, but Go's HTTP/2 servers (net/http's bundled one and
// golang.org/x/net/http2) advertise SETTINGS_ENABLE_CONNECT_PROTOCOL only when GODEBUG
// holds http2xconnect=1, and they read GODEBUG once, in their package init.
//
// This package only sets that variable, in its own init. It imports nothing but os and
// strings, so Go's initialisation order (packages sorted by import path, each started
// once its imports are done) runs it before net/http and x/net/http2, whose paths sort
// after it and which import os themselves. main imports it first. An operator's explicit
// http2xconnect=0 is kept.
package h2websocket

import (
	"os"
	"strings"
)

func init() {
	v := os.Getenv("GODEBUG")
	if strings.Contains(v, "http2xconnect=") {
		return
	}
	if v != "" {
		v += ","
	}
	_ = os.Setenv("GODEBUG", v+"http2xconnect=1")
}
