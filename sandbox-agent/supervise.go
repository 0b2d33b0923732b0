package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// supervise runs args (a command and its arguments) and starts it again a second after
// each exit, until SIGTERM or SIGINT, which it passes on and then exits with the
// command. It is the egress enforcer's PID 1 in its sidecar (whose image has no shell):
// an enforcer that dies is back within a second, in the same container, with its state
// file, and the nftables table stays in force meanwhile.
func supervise(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		usage()
		return 2
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	for {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "sandgate: start %s: %v\n", args[0], err)
			return 127
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case sig := <-signals:
			_ = cmd.Process.Signal(sig)
			return exitCode(<-exited)
		case err := <-exited:
			fmt.Fprintf(os.Stderr, "sandgate: %s exited with status %d; restarting\n", args[0], exitCode(err))
		}
		select {
		case sig := <-signals:
			return 128 + int(sig.(syscall.Signal))
		case <-time.After(time.Second):
		}
	}
}

// exitCode is the exit status a command's Wait error stands for.
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		return 1
	}
}
