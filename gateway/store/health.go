package store

// How the store behaves when Redis goes away or freezes.
//
// Every command has a tight deadline (CommandTimeout per attempt, one retry), so a
// frozen Redis — one that accepts connections and never answers, as after SIGSTOP —
// costs a caller at most about a second instead of stalling it. After a command failed
// because Redis could not be reached, further commands fail at once with ErrUnavailable
// for failFastWindow, so that a request made of several commands pays the deadline once,
// not once per command; the first command after the window probes Redis again. Callers
// that can do without Redis (the proxy's route cache) ask Unreachable first and skip it.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis client deadlines. A command against a healthy Redis takes well under a
// millisecond; the deadlines only bound what a sick one costs.
const (
	// CommandTimeout bounds one attempt of one command (read and write each).
	CommandTimeout = 400 * time.Millisecond
	// dialTimeout bounds opening a connection.
	dialTimeout = 400 * time.Millisecond
	// poolTimeout bounds the wait for a free connection when all are busy.
	poolTimeout = 500 * time.Millisecond
	// failFastWindow is how long after a failure commands fail without trying.
	failFastWindow = 500 * time.Millisecond
)

// ErrFailFast is wrapped (with ErrUnavailable) in the error of a command that was not
// sent because Redis failed a moment ago.
var ErrFailFast = errors.New("redis failed less than a moment ago; not retried yet")

// health tracks whether Redis answers, from the outcome of every command.
type health struct {
	// lastFailure is the UnixNano time of the last failure to reach Redis; zero once a
	// command succeeded after it.
	lastFailure atomic.Int64
	// downSince is when the current outage began (zero: none).
	downSince atomic.Int64
}

func (h *health) observe(err error) {
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		h.lastFailure.Store(0)
		h.downSince.Store(0)
	case errors.Is(err, ErrFailFast):
	case unreachable(err):
		now := time.Now().UnixNano()
		h.lastFailure.Store(now)
		h.downSince.CompareAndSwap(0, now)
	default:
		// A Redis error reply (a script error, WRONGTYPE): Redis answered.
		h.lastFailure.Store(0)
		h.downSince.Store(0)
	}
}

// failingFast reports whether a command should not even be tried.
func (h *health) failingFast() bool {
	last := h.lastFailure.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < failFastWindow
}

// unreachable reports whether err means Redis could not be reached or did not answer
// in time (as opposed to an error reply).
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	// A caller's own context ending says nothing about Redis.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	return isConnectionMessage(err.Error())
}

// healthHook feeds health and applies the fail-fast window to every command.
type healthHook struct{ h *health }

func (k healthHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k healthHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k.h.failingFast() {
			err := fmt.Errorf("%w: %w", ErrUnavailable, ErrFailFast)
			cmd.SetErr(err)
			return err
		}
		err := next(ctx, cmd)
		k.h.observe(err)
		return err
	}
}

func (k healthHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if k.h.failingFast() {
			err := fmt.Errorf("%w: %w", ErrUnavailable, ErrFailFast)
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		err := next(ctx, cmds)
		k.h.observe(err)
		return err
	}
}

// Unreachable reports whether Redis failed to answer a moment ago (and no command has
// succeeded since). Callers that can serve from memory skip Redis while it holds.
func (s *Store) Unreachable() bool { return s.health.failingFast() }

// DownSince returns when the current outage began, as seen by this gateway's commands;
// the zero time when Redis answered last.
func (s *Store) DownSince() time.Time {
	if t := s.health.downSince.Load(); t != 0 {
		return time.Unix(0, t)
	}
	return time.Time{}
}

// Ready checks that Redis answers now, bypassing the fail-fast window: the readiness
// endpoint's probe.
func (s *Store) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := s.probe.Ping(ctx).Err()
	s.health.observe(err)
	if err == nil {
		// The probe has a pool of its own. After an outage in which every dial failed,
		// go-redis keeps the commands' pool refusing until its own redial succeeds (up to
		// a second later): ready means that pool answers too, or a request right after a
		// 200 from /v1/ready would get a 503.
		err = s.rdb.Ping(ctx).Err()
	}
	return wrap(err)
}
