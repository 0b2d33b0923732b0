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
	"errors"
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

// input is the part of decide_ttl's input this plugin reads.
type input struct {
	reason       string
	now, current time.Time
	requested    time.Time // zero when absent
	hasActivity  bool
	activityPort int64
}

// parse reads the input in one pass with guest.Members: encoding/json
// would cost more than the whole decision (see ABI.md).
func parse(doc []byte) (in input, err error) {
	var now, current, requested []byte
	ok := guest.Members(doc, func(key, value []byte) bool {
		switch string(key) {
		case "reason":
			in.reason, _ = guest.String(value)
		case "now":
			now = value
		case "currentExpiresAt":
			current = value
		case "requestedExpiresAt":
			requested = value
		case "activity":
			if raw, ok := guest.Lookup(value, "port"); ok {
				in.hasActivity = true
				in.activityPort, _ = guest.Int(raw)
			}
		}
		return true
	})
	if !ok {
		return in, errors.New("input is not a JSON object")
	}
	if in.now, err = parseTime("now", now); err != nil {
		return in, err
	}
	if in.current, err = parseTime("currentExpiresAt", current); err != nil {
		return in, err
	}
	if requested != nil {
		if in.requested, err = parseTime("requestedExpiresAt", requested); err != nil {
			return in, err
		}
	}
	return in, nil
}

func parseTime(name string, raw []byte) (time.Time, error) {
	s, ok := guest.String(raw)
	if !ok {
		return time.Time{}, fmt.Errorf("%s is not a string", name)
	}
	return time.Parse(time.RFC3339Nano, s)
}

var (
	noChange = []byte(`{"noChange":true}`)
	out      []byte
)

//go:wasmexport decide_ttl
func decideTTL(ptr, n uint32) uint64 {
	in, err := parse(guest.Input(ptr, n))
	if err != nil {
		guest.Log(guest.LevelWarn, "ttl-on-activity: unreadable input: "+err.Error())
		return guest.Output(noChange)
	}
	var want time.Time
	switch in.reason {
	case "activity":
		if !portAllowed(in) {
			return guest.Output(noChange)
		}
		want = in.now.Add(time.Duration(conf.ExtendMinutes) * time.Minute)
	case "renew":
		if in.requested.IsZero() {
			return guest.Output(noChange)
		}
		want = in.requested
	default:
		return guest.Output(noChange)
	}
	if conf.MaxMinutesAhead > 0 {
		if limit := in.now.Add(time.Duration(conf.MaxMinutesAhead) * time.Minute); want.After(limit) {
			want = limit
		}
	}
	// Activity only ever extends; a renew may shorten, as the caller asked.
	if in.reason == "activity" && !want.After(in.current) {
		return guest.Output(noChange)
	}
	out = append(out[:0], `{"expiresAt":"`...)
	out = want.UTC().AppendFormat(out, time.RFC3339Nano)
	out = append(out, `"}`...)
	return guest.Output(out)
}

func portAllowed(in input) bool {
	if len(conf.Ports) == 0 {
		return true
	}
	if !in.hasActivity {
		return false
	}
	for _, p := range conf.Ports {
		if int64(p) == in.activityPort {
			return true
		}
	}
	return false
}

func main() {}
