package initproc

import (
	"runtime"
	"sync"
)

// ReservedThreads is how many OS threads the agent makes at start and keeps: enough for
// the blocking syscalls of its busiest moments, few enough that a thousand sandboxes on
// one host do not use up its pids (each thread is a task of the host).
const ReservedThreads = 16

// ReserveThreads makes the Go runtime start n OS threads now and leaves them idle.
//
// A workload that uses up the sandbox's pids limit (a fork bomb) leaves no pid for a new
// thread, and the Go runtime aborts the whole process when it needs a thread and cannot
// make one: a blocking syscall, such as a file read or wait4, hands its processor to
// another thread. As PID 1 the agent would take the sandbox down with it. The runtime
// never ends an idle thread, so threads made here are reused instead: each goroutine
// below holds its own thread (LockOSThread) until all n exist, then lets it go.
func ReserveThreads(n int) {
	var ready, release sync.WaitGroup
	ready.Add(n)
	release.Add(1)
	for range n {
		go func() {
			runtime.LockOSThread()
			ready.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	release.Done()
}
