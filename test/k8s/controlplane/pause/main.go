// Command pause is the real node's pod sandbox image: the process that holds a pod's
// namespaces while its containers come and go. It sleeps, reaps the children it inherits
// as PID 1, and exits on SIGTERM or SIGINT, as the upstream pause container does; it is
// built here because the test machine reaches no registry to pull that one from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
