package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Event is one entry of a tenant's event stream (audit and activity). The same shape is
// handed to tenants' plugins (see plugins/ABI.md).
type Event struct {
	ID        string         `json:"id,omitempty"`
	Type      string         `json:"type"`
	Tenant    string         `json:"tenant"`
	SandboxID string         `json:"sandboxId,omitempty"`
	Time      time.Time      `json:"time"`
	Data      map[string]any `json:"data,omitempty"`
	// Access, when set, is the event's data in place of Data: a preview.accessed event,
	// which the proxy queues for every request it forwards, held typed (a map of its
	// seven values cost a dozen allocations). It is written as Data = Access.Map() would
	// be; events read back have Data.
	Access *AccessData `json:"-"`
}

// DataMap is the event's data as a map: Data, or Access's.
func (ev Event) DataMap() map[string]any {
	if ev.Access != nil {
		return ev.Access.Map()
	}
	return ev.Data
}

// withData is ev with Access, if set, as Data (for json.Marshal, which skips Access).
func (ev Event) withData() Event {
	if ev.Access != nil {
		ev.Data, ev.Access = ev.Access.Map(), nil
	}
	return ev
}

// eventStreamMax bounds each tenant's stream; older entries are trimmed approximately.
const eventStreamMax = 100000

func (s *Store) eventStream(tenant string) string { return s.Key("events", tenant) }

// AppendEvent adds ev to its tenant's stream and returns the stream id.
func (s *Store) AppendEvent(ctx context.Context, ev Event) (string, error) {
	body, err := encodeEvent(ev)
	if err != nil {
		return "", fmt.Errorf("encode event: %w", err)
	}
	id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.eventStream(ev.Tenant),
		MaxLen: eventStreamMax,
		Approx: true,
		Values: []any{"type", ev.Type, "json", body},
	}).Result()
	return id, wrap(err)
}

// ReadEvents returns up to count events of tenant after the stream id after ("" = from the start).
func (s *Store) ReadEvents(ctx context.Context, tenant, after string, count int64) ([]Event, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	msgs, err := s.rdb.XRangeN(ctx, s.eventStream(tenant), start, "+", count).Result()
	if err != nil {
		return nil, wrap(err)
	}
	return decodeEvents(msgs), nil
}

// xaddArgs is how many arguments AppendEvents's XADD of one event has.
const xaddArgs = 10

// eventStreamMaxArg is eventStreamMax as a command argument, boxed once.
var eventStreamMaxArg any = int64(eventStreamMax)

// AppendEvents writes several events in one pipelined round trip. It sends what XAdd
// with MaxLen eventStreamMax, Approx and the values type and json would, built for the
// whole batch at once (gateway/eventlog's batched writer's: an event per proxied
// request): the bodies encoded into one buffer, every command's arguments windows of
// one slice, a tenant's stream name and an event type boxed once. A command then costs
// its own command and its reply, not a dozen allocations.
func (s *Store) AppendEvents(ctx context.Context, evs []Event) error {
	bodies := encodeEvents(evs)
	args := make([]any, 0, xaddArgs*len(evs))
	var tenant, typ string
	var stream, typArg any
	pipe := s.rdb.Pipeline()
	for i, ev := range evs {
		if bodies[i] == nil {
			continue // not encodable (as encodeEvent's error)
		}
		if stream == nil || ev.Tenant != tenant {
			tenant, stream = ev.Tenant, s.eventStream(ev.Tenant)
		}
		if typArg == nil || ev.Type != typ {
			typ, typArg = ev.Type, ev.Type
		}
		n := len(args)
		args = append(args, "xadd", stream, "maxlen", "~", eventStreamMaxArg, "*", "type", typArg, "json", bodies[i])
		_ = pipe.Process(ctx, redis.NewStringCmd(ctx, args[n:len(args):len(args)]...))
	}
	_, err := pipe.Exec(ctx)
	return wrap(err)
}

// appendPerSandboxScript writes one event per sandbox id, each the same JSON but for its
// id: the body is spliced from the parts around it.
var appendPerSandboxScript = newOpScript(`
-- KEYS: stream, (op token); ARGV: maxLen, type, body before the id, body after it, ids...
for i = 5, #ARGV do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'type', ARGV[2], 'json', ARGV[3] .. ARGV[i] .. ARGV[4])
end
return #ARGV - 4
`)

// sandboxIDMarker stands for the id in the body AppendPerSandbox splices.
const sandboxIDMarker = "\x01sandbox-id\x01"

// AppendPerSandbox writes ev once for each of ids (as its SandboxID), in one script:
// what a batch claim emits, 1000 sandbox.created events that differ only by their
// sandbox, without encoding each and sending each as a command of its own.
func (s *Store) AppendPerSandbox(ctx context.Context, ev Event, ids []string) error {
	ev.SandboxID = sandboxIDMarker
	body, err := json.Marshal(ev.withData())
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	quoted, _ := json.Marshal(sandboxIDMarker)
	before, after, ok := strings.Cut(string(body), string(quoted))
	if !ok || strings.Contains(after, string(quoted)) {
		return fmt.Errorf("encode event: the sandbox id is not in one place")
	}
	args := make([]any, 0, 4+len(ids))
	args = append(args, eventStreamMax, ev.Type, before, after)
	for _, id := range ids {
		// An id is spliced in as its JSON string.
		q, err := json.Marshal(id)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		args = append(args, q)
	}
	return wrap(appendPerSandboxScript.Run(ctx, s, []string{s.eventStream(ev.Tenant)}, args...).Err())
}

// ReadEventsBefore returns up to count events of tenant before the stream id before
// ("" = from the newest), newest first.
func (s *Store) ReadEventsBefore(ctx context.Context, tenant, before string, count int64) ([]Event, error) {
	end := "+"
	if before != "" {
		end = "(" + before
	}
	msgs, err := s.rdb.XRevRangeN(ctx, s.eventStream(tenant), end, "-", count).Result()
	if err != nil {
		return nil, wrap(err)
	}
	return decodeEvents(msgs), nil
}

// WaitEvents blocks up to block for events of tenant after the stream id after ("$":
// only those written from now on) and returns them, oldest first (none on a timeout).
// It reads on a separate connection pool, so that idle live streams never hold the
// connections requests need.
func (s *Store) WaitEvents(ctx context.Context, tenant, after string, block time.Duration, count int64) ([]Event, error) {
	streams, err := s.blockingClient().XRead(ctx, &redis.XReadArgs{
		Streams: []string{s.eventStream(tenant), after}, Count: count, Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err)
	}
	var out []Event
	for _, st := range streams {
		out = append(out, decodeEvents(st.Messages)...)
	}
	return out, nil
}

// LastEventID returns the id of the newest event of tenant ("0" when there is none).
func (s *Store) LastEventID(ctx context.Context, tenant string) (string, error) {
	msgs, err := s.rdb.XRevRangeN(ctx, s.eventStream(tenant), "+", "-", 1).Result()
	if err != nil {
		return "", wrap(err)
	}
	if len(msgs) == 0 {
		return "0", nil
	}
	return msgs[0].ID, nil
}

func decodeEvents(msgs []redis.XMessage) []Event {
	out := make([]Event, 0, len(msgs))
	for _, m := range msgs {
		var ev Event
		if str, ok := m.Values["json"].(string); ok && json.Unmarshal([]byte(str), &ev) == nil {
			ev.ID = m.ID
			out = append(out, ev)
		}
	}
	return out
}
