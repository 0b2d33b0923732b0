package api

import "sync"

// forwardBufferSize is the size of the buffers NewForward copies bodies through: one
// per proxied request in flight, reused (without a pool httputil allocates 32 KiB per
// request, garbage at the next GC).
const forwardBufferSize = 32 << 10

// bufferPool lends NewForward its copy buffers (httputil.BufferPool).
type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, forwardBufferSize)
}

func (p *bufferPool) Put(b []byte) {
	if cap(b) < forwardBufferSize {
		return
	}
	b = b[:forwardBufferSize]
	p.pool.Put(&b)
}

var forwardBuffers = &bufferPool{}
