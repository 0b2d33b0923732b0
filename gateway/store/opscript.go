package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// A write the client sends twice must take effect once and answer the same both times.
// The client sends a command again when its answer misses the read deadline
// (CommandTimeout: a Redis busy with a long script, a slow network), after a reset
// connection, and on a cluster's redirects; the first send may well have run. So every
// script whose second run would change more, or answer otherwise (a conflict for the
// caller's own create, "not found" for its own delete, a second pop of warm members),
// is an opScript: it is called with one more key, its op's token key, in the slot of its
// first key; the first run leaves its answer there for opTTL, and a run that finds the
// key answers that instead of running again. The token key is written in the script's
// atomic step, so it replicates with the write it stands for: a failover that lost the
// write lost the token too, and the second send then makes the write, as it should.
// docs/DECISIONS.md ("A write sent twice") says why this, not turning the retry off.

// opTTL is how long a token key is kept, in milliseconds as the scripts' PX takes it:
// far past the longest gap between two sends of one command (two read deadlines and a
// backoff, about a second), short enough that the keys cost little (docs/SCALE.md
// counts them).
const opTTL = "60000"

// opScript is a write script made safe to run twice (above). Its body reads KEYS and
// ARGV as any script's; it must return a value cjson keeps as it is (numbers, strings,
// arrays of them, false).
type opScript struct{ sc *redis.Script }

func newOpScript(body string) *opScript {
	return &opScript{redis.NewScript(`local op = KEYS[#KEYS]
local done = redis.call('GET', op)
if done then return cjson.decode(done) end
local function run()
` + body + `
end
local out = run()
if out == nil then out = false end
redis.call('SET', op, cjson.encode(out), 'PX', ` + opTTL + `)
return out
`)}
}

// Run runs the script with keys and, after them, a fresh token key in the slot of
// keys[0].
func (o *opScript) Run(ctx context.Context, s *Store, keys []string, args ...any) *redis.Cmd {
	keys = append(keys[:len(keys):len(keys)], s.opKey(keys[0]))
	return o.sc.Run(ctx, s.rdb, keys, args...)
}

// opNode makes this process's tokens unlike any other's; opSeq numbers them.
var (
	opNode = func() string {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			panic("store: no randomness for op tokens: " + err.Error())
		}
		return hex.EncodeToString(b)
	}()
	opSeq atomic.Uint64
)

// opKey returns a fresh token key in the slot of key: under key's hash tag, or, for a
// key without one, under a tag of the whole key (Redis hashes a key without a tag
// whole, so the tag {key} names the same slot).
func (s *Store) opKey(key string) string {
	tag := "{" + key + "}"
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			tag = key[i : i+j+2]
		}
	}
	return s.prefix + tag + ":op:" + opNode + strconv.FormatUint(opSeq.Add(1), 36)
}

// createFieldScript is HSETNX as an opScript: a create of a pool or tenant sent again
// answers that it created it, not that it exists.
var createFieldScript = newOpScript(`
-- KEYS: hash, (op token); ARGV: field, value
return redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
`)
