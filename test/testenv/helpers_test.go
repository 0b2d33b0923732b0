package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortIsBelowTheEphemeralRange: a port the kernel can hand to any bind to port 0
// or outgoing connection is not one a test's process can count on binding later.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	low, high := pickablePorts()
	if high <= low {
		t.Skip("the ephemeral range leaves no room below it")
	}
	for range 20 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < low || port >= high {
			t.Fatalf("port %d is outside [%d, %d), the ports below the ephemeral range", port, low, high)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		l.Close()
	}
}
