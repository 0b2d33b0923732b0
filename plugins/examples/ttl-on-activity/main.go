//go:build wasip1

// Command ttl-on-activity extends a sandbox's expiry whenever its preview
// URLs see traffic: on each "activity" decision the expiry becomes now plus
// extendMinutes, never further than maxMinutesAhead from now (the host also
// clamps to the tenant's maxExpiresAt). An explicit renew is passed through
// unchanged, within the same cap.
//
// Settings:
//
//	{"extendMinutes": 15, "maxMinutesAhead": 120, "ports": [8080]}
//
// ports limits extension to activity on those ports (all when empty).
package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/plugins/guest"
)

type settings struct {
	ExtendMinutes   int   `json:"extendMinutes"`
	MaxMinutesAhead int   `json:"maxMinutesAhead"`
	Ports           []int `json:"ports"`
}

var conf = settings{ExtendMinutes: 10}

func init() {
	guest.OnConfigure(func(raw []byte) error {
		if err := json.Unmarshal(raw, &conf); err != nil {
			return fmt.Errorf("settings: %w", err)
		}
		if conf.ExtendMinutes <= 0 {
			return fmt.Errorf("settings: extendMinutes must be positive, got %d", conf.ExtendMinutes)
		}
		if conf.MaxMinutesAhead < 0 {
			return fmt.Errorf("settings: maxMinutesAhead must not be negative")
		}
		return nil
	})
}

var (
	noChange = []byte(`{"noChange":true}`)
	out      []byte
)

//go:wasmexport decide_ttl
func decideTTL(ptr, n uint32) uint64 {
	in, err := guest.ParseTTLInput(guest.Input(ptr, n))
	if err != nil {
		guest.Log(guest.LevelWarn, "ttl-on-activity: unreadable input: "+err.Error())
		return guest.Output(noChange)
	}
	var want time.Time
	switch in.Reason {
	case "activity":
		if !portAllowed(in) {
			return guest.Output(noChange)
		}
		want = in.Now.Add(time.Duration(conf.ExtendMinutes) * time.Minute)
	case "renew":
		if in.RequestedExpiresAt.IsZero() {
			return guest.Output(noChange)
		}
		want = in.RequestedExpiresAt
	default:
		return guest.Output(noChange)
	}
	if conf.MaxMinutesAhead > 0 {
		if limit := in.Now.Add(time.Duration(conf.MaxMinutesAhead) * time.Minute); want.After(limit) {
			want = limit
		}
	}
	// Activity only ever extends; a renew may shorten, as the caller asked.
	if in.Reason == "activity" && !want.After(in.CurrentExpiresAt) {
		return guest.Output(noChange)
	}
	out = append(out[:0], `{"expiresAt":"`...)
	out = want.UTC().AppendFormat(out, time.RFC3339Nano)
	out = append(out, `"}`...)
	return guest.Output(out)
}

func portAllowed(in guest.TTLInput) bool {
	if len(conf.Ports) == 0 {
		return true
	}
	if !in.HasActivity {
		return false
	}
	for _, p := range conf.Ports {
		if int64(p) == in.ActivityPort {
			return true
		}
	}
	return false
}

func main() {}
