package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster's key → slot: CRC16 (XMODEM) of the hash tag (the text between the
// first { and the next }, when not empty) or of the whole key, mod 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// TestKeySlot: the slot function agrees with Redis Cluster's own examples.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            12739, // the CRC16 check value 0x31C3
		"foo":                  12182,
		"{user1000}.following": keySlot("user1000"),
		"foo{}{bar}":           keySlot("foo{}{bar}"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("sg:{t:a}:sandbox:1") != keySlot("x{t:a}y") {
		t.Error("keys of one tag in different slots")
	}
}

// slotCheck fails the test when a script is called with keys of two slots, or a
// MULTI/EXEC touches keys of two slots: what Redis Cluster refuses with CROSSSLOT.
// Every store test runs with it (openTestStore).
type slotCheck struct{ t testing.TB }

func (h slotCheck) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slotCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check("", []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h slotCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			h.check("MULTI", cmds)
		} else {
			h.check("", cmds)
		}
		return next(ctx, cmds)
	}
}

// check looks at each script call of cmds, and at all of cmds together when tx names
// a transaction.
func (h slotCheck) check(tx string, cmds []redis.Cmder) {
	txKeys := map[int]string{}
	for _, c := range cmds {
		args := c.Args()
		switch c.Name() {
		case "eval", "evalsha", "eval_ro", "evalsha_ro":
			if len(args) < 3 {
				continue
			}
			n, _ := strconv.Atoi(fmt.Sprint(args[2]))
			slots := map[int]string{}
			for _, k := range args[3 : 3+n] {
				key := fmt.Sprint(k)
				slots[keySlot(key)] = key
			}
			if len(slots) > 1 {
				h.t.Errorf("a script touches keys of %d slots: %v", len(slots), slots)
			}
			for sl, k := range slots {
				txKeys[sl] = k
			}
		case "multi", "exec", "publish", "ping":
		default:
			if len(args) > 1 {
				key := fmt.Sprint(args[1])
				txKeys[keySlot(key)] = key
			}
		}
	}
	if tx != "" && len(txKeys) > 1 {
		h.t.Errorf("a transaction touches keys of %d slots: %v", len(txKeys), txKeys)
	}
}
