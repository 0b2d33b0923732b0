package runtimes

import "time"

// Usage is one reading of a sandbox's resource use, as the engine counts it.
// Cumulative counters (CPU time, network bytes) let the reader derive rates from two
// readings. A field the engine does not know is zero, with its Known flag false.
type Usage struct {
	// Time is when the engine took the reading.
	Time time.Time
	// CPUNanos is the CPU time the sandbox has used in total.
	CPUNanos uint64
	// CPULimit is the number of CPUs the sandbox may use (its quota), 0 when unlimited.
	CPULimit float64
	// MemoryBytes is the memory in use without reclaimable page cache; MemoryPeakBytes
	// the most it used (0: the engine does not say); MemoryLimitBytes its limit.
	MemoryBytes, MemoryPeakBytes, MemoryLimitBytes uint64
	// Pids is the number of processes and threads.
	Pids uint64
	// NetRxBytes and NetTxBytes are the bytes received and sent on its network.
	NetRxBytes, NetTxBytes uint64
	// NetKnown and PidsKnown say whether the engine reported those fields.
	NetKnown, PidsKnown bool
	// DiskBytes is the size of the sandbox's writable layer; DiskKnown says whether it
	// was read (it is costly, so not on every reading).
	DiskBytes int64
	DiskKnown bool
}
