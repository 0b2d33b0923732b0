package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Event is one server-sent execution event. The framing is execd's: the bare JSON object
// followed by a blank line (SDKs also accept "data:"-prefixed lines, but none needs it).
type Event struct {
	Type           string         `json:"type"`
	Text           string         `json:"text,omitempty"`
	ExecutionCount int            `json:"execution_count,omitempty"`
	ExecutionTime  int64          `json:"execution_time,omitempty"`
	Timestamp      int64          `json:"timestamp"`
	Results        map[string]any `json:"results,omitempty"`
	Error          *EventError    `json:"error,omitempty"`
}

// EventError is the error payload of an "error" event.
type EventError struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// Event types.
const (
	EventInit           = "init"
	EventStdout         = "stdout"
	EventStderr         = "stderr"
	EventResult         = "result"
	EventErr            = "error"
	EventComplete       = "execution_complete"
	EventExecutionCount = "execution_count"
	EventPing           = "ping"
)

// eventStream writes events to one HTTP response. Writers may be concurrent (stdout and
// stderr readers); each event is written whole. Flushing is left to the caller so that
// bulk output is batched and interactive output is not delayed.
type eventStream struct {
	mu        sync.Mutex
	w         *bufio.Writer // batches small events into large writes
	rc        *http.ResponseController
	lastWrite time.Time
	err       error
	buf       []byte
}

// newEventStream starts the response and sends its headers at once, for a stream whose
// first event may be a while coming.
func newEventStream(w http.ResponseWriter) *eventStream {
	s := startEventStream(w)
	_ = s.rc.Flush()
	return s
}

// openEventStream starts the response with first, headers and event in one write (one
// packet, where newEventStream and a send make two).
func openEventStream(w http.ResponseWriter, first Event) *eventStream {
	s := startEventStream(w)
	_ = s.send(first, true)
	return s
}

func startEventStream(w http.ResponseWriter) *eventStream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	bw := streamWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	return &eventStream{w: bw, rc: http.NewResponseController(w), lastWrite: time.Now()}
}

// streamWriters keeps the buffers of released streams. A command's stream would
// otherwise allocate (and zero) 64 KiB per command, which with the GC work it causes was
// the largest part of the agent's own CPU per `true`.
var streamWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// errStreamReleased fails the sends that come after release (a keepalive ping that
// raced the end of the stream).
var errStreamReleased = errors.New("event stream released")

// release gives the stream's buffer back for reuse once its handler is done with it
// (after end). Later sends fail without writing.
func (s *eventStream) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return
	}
	if s.err == nil {
		s.err = errStreamReleased
	}
	s.w.Reset(nil)
	streamWriters.Put(s.w)
	s.w = nil
}

// end sends the stream's last event without flushing it on its own: the handler returns
// next, and net/http writes it together with the end of the response (one write, where
// a flushed send and the end make two). The handler must return right after.
func (s *eventStream) end(last Event) {
	if s.send(last, false) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.w.Flush(); err != nil { // into the ResponseWriter, not onto the wire
		s.err = err
	}
}

// send writes ev and flushes when flush is set. It returns the first write error, after
// which every send fails: the client is gone.
func (s *eventStream) send(ev Event, flush bool) error {
	if ev.Timestamp == 0 {
		ev.Timestamp = time.Now().UnixMilli()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if ev.Results == nil && ev.Error == nil && ev.ExecutionCount == 0 && ev.ExecutionTime == 0 {
		// Output lines are almost all of the traffic: encode them without reflection.
		s.buf = appendTextEvent(s.buf[:0], ev)
	} else {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		s.buf = append(s.buf[:0], b...)
	}
	s.buf = append(s.buf, '\n', '\n')
	if _, err := s.w.Write(s.buf); err != nil {
		s.err = err
		return err
	}
	s.lastWrite = time.Now()
	if flush {
		return s.flushLocked()
	}
	return nil
}

func (s *eventStream) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.flushLocked()
}

func (s *eventStream) flushLocked() error {
	if s.err != nil {
		return s.err
	}
	if err := s.w.Flush(); err != nil {
		s.err = err
		return err
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
		return err
	}
	return nil
}

// keepAlive sends a ping event whenever the stream has been silent for interval, until
// stop is closed.
func (s *eventStream) keepAlive(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.mu.Lock()
			idle := time.Since(s.lastWrite)
			s.mu.Unlock()
			if idle >= interval {
				if s.send(Event{Type: EventPing, Text: "pong"}, true) != nil {
					return
				}
			}
		}
	}
}

// appendTextEvent encodes an event that has only type, text and timestamp, exactly as
// json.Marshal would (minus its HTML escaping, which a stream does not need).
func appendTextEvent(b []byte, ev Event) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, ev.Type)
	if ev.Text != "" {
		b = append(b, `,"text":`...)
		b = appendJSONString(b, ev.Text)
	}
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, ev.Timestamp, 10)
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
