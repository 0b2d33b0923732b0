package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// FreePort returns a loopback TCP port that was free a moment ago, for a process the
// test starts to listen on. It is picked at random below the kernel's ephemeral range
// (ip_local_port_range), from which the kernel hands out the ports of every bind to
// port 0 and of every outgoing connection: a port from that range, free when picked,
// can be taken by any of those before the process binds it (a gateway's embedded store
// took its own HTTP port so). Below it, only another test picking likewise can, at
// random among thousands. When the range leaves no room below it, the kernel picks.
func FreePort() (int, error) {
	low, high := pickablePorts()
	for attempt := 0; attempt < 50 && high > low; attempt++ {
		var b [2]byte
		_, _ = rand.Read(b[:])
		port := low + int(uint16(b[0])<<8|uint16(b[1]))%(high-low)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pickablePorts is the range [low, high) FreePort picks from: from 10000 up to the first
// port of the ephemeral range.
func pickablePorts() (low, high int) {
	const lowest = 10000
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lowest, lowest
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return lowest, lowest
	}
	first, err := strconv.Atoi(fields[0])
	if err != nil || first <= lowest {
		return lowest, lowest
	}
	return lowest, first
}

// WaitFor polls cond every 50 ms and fails the test when it is not true within d.
func WaitFor(t testing.TB, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Tail returns the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// SyncBuffer collects a process's output (or a logger's) while tests read it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
