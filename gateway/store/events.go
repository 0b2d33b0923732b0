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

func (s *Store) changesChannel() string { return s.Key("changes") }

// PublishChange tells every gateway that sandbox id changed (or went away).
func (s *Store) PublishChange(ctx context.Context, id string) error {
	return wrap(s.rdb.Publish(ctx, s.changesChannel(), id).Err())
}

// SubscribeChanges calls fn with each changed sandbox id until ctx ends or the
// connection fails.
func (s *Store) SubscribeChanges(ctx context.Context, fn func(id string)) error {
	return s.subscribe(ctx, s.changesChannel(), nil, fn)
}

// SubscribeChangesReady is SubscribeChanges that calls ready once the subscription
// holds: a reader that lists after ready misses no change.
func (s *Store) SubscribeChangesReady(ctx context.Context, ready func(), fn func(id string)) error {
	return s.subscribe(ctx, s.changesChannel(), ready, fn)
}

// xaddArgs is how many arguments AppendEvents's XADD of one event has.
const xaddArgs = 10

// eventStreamMaxArg is eventStreamMax as a command argument, boxed once.
var eventStreamMaxArg any = int64(eventStreamMax)

// AppendEvents writes several events in one pipelined round trip. It sends what XAdd
// with MaxLen eventStreamMax, Approx and the values type and json would, built for the
// whole batch at once (the batched writer's, runAccessLog: an event per proxied
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

// TouchActivity records when a sandbox was last used.
func (s *Store) TouchActivity(ctx context.Context, id string, at time.Time) error {
	return wrap(s.rdb.ZAdd(ctx, s.Key("activity"), redis.Z{Score: float64(at.UnixMilli()), Member: id}).Err())
}

// TouchActivities records when each of several sandboxes was last used, in one command.
func (s *Store) TouchActivities(ctx context.Context, at map[string]time.Time) error {
	if len(at) == 0 {
		return nil
	}
	zs := make([]redis.Z, 0, len(at))
	for id, t := range at {
		zs = append(zs, redis.Z{Score: float64(t.UnixMilli()), Member: id})
	}
	return wrap(s.rdb.ZAdd(ctx, s.Key("activity"), zs...).Err())
}

// LastActivity returns when a sandbox was last used (zero if never).
func (s *Store) LastActivity(ctx context.Context, id string) (time.Time, error) {
	ms, err := s.rdb.ZScore(ctx, s.Key("activity"), id).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	return time.UnixMilli(int64(ms)), wrap(err)
}

// cooldownScript starts a cooldown unless one started less than a window ago. The key
// holds when the last one started, on the clock of the gateway that started it; the
// decision compares that with the caller's now, so that it is taken on the gateway's
// clock, not on Redis's. The key's own expiry (two windows) only bounds what a clock
// far behind can hold off, and clears the key.
var cooldownScript = newOpScript(`
local last = tonumber(redis.call('GET', KEYS[1]))
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
if last and now < last + window then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', 2 * window)
return 1
`)

// TryCooldown reports true at most once per window for name, across all gateways, at
// the caller's time now. Between gateways whose clocks differ by d, the window is kept
// to within d: a gateway ahead may start the next one d early, one behind waits d
// longer (at most a second window, when the key expires).
func (s *Store) TryCooldown(ctx context.Context, name string, now time.Time, window time.Duration) (bool, error) {
	n, err := cooldownScript.Run(ctx, s, []string{s.Key("cooldown", name)}, now.UnixMilli(), max(window.Milliseconds(), 1)).Int()
	return n == 1, wrap(err)
}

// LinkKeys returns the link signing keys (kid → hex secret) and the current kid.
func (s *Store) LinkKeys(ctx context.Context) (map[string]string, string, error) {
	all, err := s.rdb.HGetAll(ctx, s.Key("linkkeys")).Result()
	if err != nil {
		return nil, "", wrap(err)
	}
	cur := all["_current"]
	delete(all, "_current")
	delete(all, "_previous")
	return all, cur, nil
}

var rotateKeyScript = redis.NewScript(`
-- keep the current key as previous, drop the one before it, make the new key current
local cur = redis.call('HGET', KEYS[1], '_current')
-- A rotation sent again (its answer late) finds itself done: running it again would drop
-- the previous key (the current one before it) for its own.
if cur == ARGV[1] and redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return ARGV[1] end
local prev = redis.call('HGET', KEYS[1], '_previous')
if prev then redis.call('HDEL', KEYS[1], prev) end
if cur then redis.call('HSET', KEYS[1], '_previous', cur) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], '_current', ARGV[1])
return ARGV[1]
`)

// RotateLinkKey installs a new current signing key, keeping only the previous one beside it.
func (s *Store) RotateLinkKey(ctx context.Context, kid, secretHex string) (string, error) {
	res, err := rotateKeyScript.Run(ctx, s.rdb, []string{s.Key("linkkeys")}, kid, secretHex).Text()
	return res, wrap(err)
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
