package guest

import (
	"errors"
	"fmt"
	"time"
)

// TTLInput is what a decide_ttl plugin usually reads of its input (ABI.md).
type TTLInput struct {
	// Reason is "activity" or "renew".
	Reason string
	// Now and CurrentExpiresAt are always present.
	Now, CurrentExpiresAt time.Time
	// RequestedExpiresAt is zero when absent (an activity decision).
	RequestedExpiresAt time.Time
	// HasActivity is true when the input names the port of the activity.
	HasActivity  bool
	ActivityPort int64
}

// ParseTTLInput reads decide_ttl's input in one pass with Members: encoding/json would
// cost more than a whole decision.
func ParseTTLInput(doc []byte) (in TTLInput, err error) {
	var now, current, requested []byte
	ok := Members(doc, func(key, value []byte) bool {
		switch string(key) {
		case "reason":
			in.Reason, _ = String(value)
		case "now":
			now = value
		case "currentExpiresAt":
			current = value
		case "requestedExpiresAt":
			requested = value
		case "activity":
			if raw, ok := Lookup(value, "port"); ok {
				in.HasActivity = true
				in.ActivityPort, _ = Int(raw)
			}
		}
		return true
	})
	if !ok {
		return in, errors.New("input is not a JSON object")
	}
	if in.Now, err = parseTime("now", now); err != nil {
		return in, err
	}
	if in.CurrentExpiresAt, err = parseTime("currentExpiresAt", current); err != nil {
		return in, err
	}
	if requested != nil {
		if in.RequestedExpiresAt, err = parseTime("requestedExpiresAt", requested); err != nil {
			return in, err
		}
	}
	return in, nil
}

func parseTime(name string, raw []byte) (time.Time, error) {
	if raw == nil {
		return time.Time{}, fmt.Errorf("%s is missing", name)
	}
	s, ok := String(raw)
	if !ok {
		return time.Time{}, fmt.Errorf("%s is not a string", name)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}
