// Package ptyhub runs interactive terminals for the /pty API: a process on a
// pseudo-terminal whose output is kept in a bounded ring with absolute offsets, so that a
// client that reconnects can ask for everything since the last byte it saw, and one
// attached client at a time that a second one may take over.
package ptyhub

import "sync"

// Ring keeps the last Cap bytes written to it, addressed by absolute offset (the
// number of bytes written before them).
type Ring struct {
	mu    sync.Mutex
	buf   []byte
	start int // index in buf of the oldest byte
	n     int // bytes held
	total int64
}

// NewRing makes a ring holding up to capacity bytes.
func NewRing(capacity int) *Ring { return &Ring{buf: make([]byte, capacity)} }

// Write appends p, dropping the oldest bytes beyond capacity. It never fails.
func (r *Ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeLocked(p)
	return len(p), nil
}

func (r *Ring) writeLocked(p []byte) {
	r.total += int64(len(p))
	c := len(r.buf)
	if len(p) >= c {
		copy(r.buf, p[len(p)-c:])
		r.start, r.n = 0, c
		return
	}
	for len(p) > 0 {
		end := (r.start + r.n) % c
		if r.n == c {
			// Full: overwrite the oldest byte region.
			k := copy(r.buf[end:min(c, end+len(p))], p)
			r.start = (r.start + k) % c
			p = p[k:]
			continue
		}
		limit := c
		if end < r.start {
			limit = r.start
		}
		k := copy(r.buf[end:limit], p)
		r.n += k
		p = p[k:]
	}
}

// Since returns the bytes from absolute offset off to the end and the offset of the
// first returned byte, which is later than off when those bytes were already dropped.
func (r *Ring) Since(off int64) ([]byte, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sinceLocked(off)
}

func (r *Ring) sinceLocked(off int64) ([]byte, int64) {
	first := r.total - int64(r.n)
	if off < first {
		off = first
	}
	if off > r.total {
		off = r.total
	}
	skip := int(off - first)
	out := make([]byte, 0, r.n-skip)
	c := len(r.buf)
	from := (r.start + skip) % c
	remaining := r.n - skip
	for remaining > 0 {
		k := min(remaining, c-from)
		out = append(out, r.buf[from:from+k]...)
		from = (from + k) % c
		remaining -= k
	}
	return out, off
}

// Total is the absolute offset of the next byte to be written.
func (r *Ring) Total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}
