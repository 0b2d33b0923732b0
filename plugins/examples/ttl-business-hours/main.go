//go:build wasip1

// Command ttl-business-hours extends sandboxes generously during business
// hours and sparingly outside them:
//
//   - on a business day (default Monday to Friday) between open and close in
//     the configured UTC offset, activity extends the expiry to now plus
//     extendMinutes, but never past that day's closing time;
//   - at any other time, activity extends only to now plus
//     offHoursExtendMinutes;
//   - an explicit renew gets the requested expiry under the same caps;
//   - activity never shortens an expiry.
//
// Settings (defaults shown):
//
//	{"utcOffsetMinutes": 0, "open": "08:00", "close": "20:00",
//	 "weekdays": [1, 2, 3, 4, 5], "extendMinutes": 60, "offHoursExtendMinutes": 10}
//
// weekdays uses Go's numbering: 0 is Sunday, 6 is Saturday.
package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/plugins/guest"
)

type settings struct {
	UTCOffsetMinutes      int    `json:"utcOffsetMinutes"`
	Open                  string `json:"open"`
	Close                 string `json:"close"`
	Weekdays              []int  `json:"weekdays"`
	ExtendMinutes         int    `json:"extendMinutes"`
	OffHoursExtendMinutes int    `json:"offHoursExtendMinutes"`
}

// rules is the settings turned into what decide_ttl needs.
type rules struct {
	zone           *time.Location
	open, close    int // minutes after local midnight
	weekdays       [7]bool
	extend         time.Duration
	offHoursExtend time.Duration
}

var rule rules

func init() {
	if err := configure([]byte("{}")); err != nil {
		panic(err)
	}
	guest.OnConfigure(configure)
}

func configure(raw []byte) error {
	s := settings{Open: "08:00", Close: "20:00", Weekdays: []int{1, 2, 3, 4, 5}, ExtendMinutes: 60, OffHoursExtendMinutes: 10}
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	var r rules
	var err error
	if s.UTCOffsetMinutes < -14*60 || s.UTCOffsetMinutes > 14*60 {
		return fmt.Errorf("settings: utcOffsetMinutes %d out of range", s.UTCOffsetMinutes)
	}
	r.zone = time.FixedZone("business", s.UTCOffsetMinutes*60)
	if r.open, err = clock(s.Open); err != nil {
		return fmt.Errorf("settings: open: %w", err)
	}
	if r.close, err = clock(s.Close); err != nil {
		return fmt.Errorf("settings: close: %w", err)
	}
	if r.close <= r.open {
		return fmt.Errorf("settings: close %s must be after open %s", s.Close, s.Open)
	}
	for _, d := range s.Weekdays {
		if d < 0 || d > 6 {
			return fmt.Errorf("settings: weekday %d out of range 0-6", d)
		}
		r.weekdays[d] = true
	}
	if s.ExtendMinutes <= 0 || s.OffHoursExtendMinutes <= 0 {
		return fmt.Errorf("settings: extendMinutes and offHoursExtendMinutes must be positive")
	}
	r.extend = time.Duration(s.ExtendMinutes) * time.Minute
	r.offHoursExtend = time.Duration(s.OffHoursExtendMinutes) * time.Minute
	rule = r
	return nil
}

// clock parses "HH:MM" into minutes after midnight.
func clock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, err
	}
	return t.Hour()*60 + t.Minute(), nil
}

var (
	noChange = []byte(`{"noChange":true}`)
	out      []byte
)

//go:wasmexport decide_ttl
func decideTTL(ptr, n uint32) uint64 {
	in, err := guest.ParseTTLInput(guest.Input(ptr, n))
	if err != nil {
		guest.Log(guest.LevelWarn, "ttl-business-hours: unreadable input: "+err.Error())
		return guest.Output(noChange)
	}
	if in.Reason != "activity" && in.Reason != "renew" {
		return guest.Output(noChange)
	}
	want, ok := decide(in)
	if !ok {
		return guest.Output(noChange)
	}
	out = append(out[:0], `{"expiresAt":"`...)
	out = want.UTC().AppendFormat(out, time.RFC3339Nano)
	out = append(out, `"}`...)
	return guest.Output(out)
}

// decide applies the business-hours rule; ok is false for "no change".
func decide(in guest.TTLInput) (time.Time, bool) {
	local := in.Now.In(rule.zone)
	minute := local.Hour()*60 + local.Minute()
	var limit time.Time
	if rule.weekdays[local.Weekday()] && minute >= rule.open && minute < rule.close {
		y, m, d := local.Date()
		closing := time.Date(y, m, d, rule.close/60, rule.close%60, 0, 0, rule.zone)
		// Activity earns extendMinutes; a renew may ask for anything up
		// to closing time. Neither goes past closing.
		limit = closing
		if in.Reason == "activity" {
			limit = earliest(in.Now.Add(rule.extend), closing)
		}
	} else {
		limit = in.Now.Add(rule.offHoursExtend)
	}
	if in.Reason == "renew" {
		if in.RequestedExpiresAt.IsZero() {
			return time.Time{}, false
		}
		return earliest(in.RequestedExpiresAt, limit), true
	}
	want := limit
	if !want.After(in.CurrentExpiresAt) {
		return time.Time{}, false
	}
	return want, true
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func main() {}
