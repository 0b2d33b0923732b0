package agent

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
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
	w         http.ResponseWriter
	rc        *http.ResponseController
	lastWrite time.Time
	err       error
	buf       []byte
}

func newEventStream(w http.ResponseWriter) *eventStream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &eventStream{w: w, rc: http.NewResponseController(w), lastWrite: time.Now()}
	_ = s.rc.Flush()
	return s
}

// send writes ev and flushes when flush is set. It returns the first write error, after
// which every send fails: the client is gone.
func (s *eventStream) send(ev Event, flush bool) error {
	if ev.Timestamp == 0 {
		ev.Timestamp = time.Now().UnixMilli()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.buf = append(append(s.buf[:0], b...), '\n', '\n')
	if _, err := s.w.Write(s.buf); err != nil {
		s.err = err
		return err
	}
	s.lastWrite = time.Now()
	if flush {
		if err := s.rc.Flush(); err != nil {
			s.err = err
			return err
		}
	}
	return nil
}

func (s *eventStream) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		if err := s.rc.Flush(); err != nil {
			s.err = err
		}
	}
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
