package store

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// encodeEvent is json.Marshal(ev), byte for byte (with Access as Data), without
// reflection when every value is one the hot paths put in events (plain strings,
// integers, finite floats, bools): the proxy queues an event per request, and
// reflecting over its data map was most of the batched writer's CPU. Anything else (a
// string that needs escaping, a nested value) goes to json.Marshal.
func encodeEvent(ev Event) ([]byte, error) {
	if b, ok := appendEvent(make([]byte, 0, 160+32*max(len(ev.Data), accessDataFields)), ev); ok {
		return b, nil
	}
	return json.Marshal(ev.withData())
}

// encodeEvents encodes each of evs as encodeEvent does, into one buffer made one
// string, and returns each body as a *string into it, an argument go-redis writes as
// that string and an interface holds without an allocation; nil for an event
// encodeEvent refuses.
func encodeEvents(evs []Event) []any {
	buf := make([]byte, 0, 320*len(evs))
	ends := make([]int, len(evs))
	for i, ev := range evs {
		start := len(buf)
		var ok bool
		if buf, ok = appendEvent(buf, ev); !ok {
			body, err := json.Marshal(ev.withData())
			if buf = buf[:start]; err != nil {
				ends[i] = -1
				continue
			}
			buf = append(buf, body...)
		}
		ends[i] = len(buf)
	}
	all := string(buf)
	strs := make([]string, len(evs))
	out := make([]any, len(evs))
	start := 0
	for i, end := range ends {
		if end < 0 {
			continue
		}
		strs[i], out[i] = all[start:end], &strs[i]
		start = end
	}
	return out
}

// appendEvent appends encodeEvent's encoding of ev to b; false (and b as it may be,
// grown) when ev needs json.Marshal.
func appendEvent(b []byte, ev Event) ([]byte, bool) {
	var keyArr [12]string
	keys := keyArr[:0]
	if ev.Access == nil {
		for k, v := range ev.Data {
			if !plainJSONString(k) || !simpleJSONValue(v) {
				return b, false
			}
			keys = append(keys, k)
		}
	} else if !ev.Access.plain() {
		return b, false
	}
	if !plainJSONString(ev.ID) || !plainJSONString(ev.Type) || !plainJSONString(ev.Tenant) || !plainJSONString(ev.SandboxID) {
		return b, false
	}
	slices.Sort(keys)
	b = append(b, '{')
	if ev.ID != "" {
		b = append(b, `"id":"`...)
		b = append(b, ev.ID...)
		b = append(b, `",`...)
	}
	b = append(b, `"type":"`...)
	b = append(b, ev.Type...)
	b = append(b, `","tenant":"`...)
	b = append(b, ev.Tenant...)
	b = append(b, '"')
	if ev.SandboxID != "" {
		b = append(b, `,"sandboxId":"`...)
		b = append(b, ev.SandboxID...)
		b = append(b, '"')
	}
	b = append(b, `,"time":"`...)
	b, err := ev.Time.AppendText(b) // what Time.MarshalJSON quotes
	if err != nil {
		return b, false
	}
	b = append(b, '"')
	switch {
	case ev.Access != nil:
		b = append(b, `,"data":`...)
		b = ev.Access.appendJSON(b)
	case len(ev.Data) > 0:
		b = append(b, `,"data":{`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, k...)
			b = append(b, `":`...)
			b = appendSimpleJSON(b, ev.Data[k])
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

// AccessData is the data of a preview.accessed event (Event.Access).
type AccessData struct {
	Port       int
	Method     string
	Path       string
	Status     int
	Bytes      int64
	DurationMs float64
	Credential string
}

// accessDataFields is how many values Map holds.
const accessDataFields = 7

// Map is d as an event's Data.
func (d *AccessData) Map() map[string]any {
	return map[string]any{
		"port": d.Port, "method": d.Method, "path": d.Path, "status": d.Status, "bytes": d.Bytes,
		"durationMs": d.DurationMs, "credential": d.Credential,
	}
}

// plain reports whether appendJSON writes d as json.Marshal writes d.Map().
func (d *AccessData) plain() bool {
	return plainJSONString(d.Method) && plainJSONString(d.Path) && plainJSONString(d.Credential) && simpleJSONValue(d.DurationMs)
}

// appendJSON appends d.Map()'s JSON object, keys sorted as json.Marshal sorts them.
func (d *AccessData) appendJSON(b []byte) []byte {
	b = append(b, `{"bytes":`...)
	b = strconv.AppendInt(b, d.Bytes, 10)
	b = append(b, `,"credential":"`...)
	b = append(b, d.Credential...)
	b = append(b, `","durationMs":`...)
	b = appendSimpleJSON(b, d.DurationMs)
	b = append(b, `,"method":"`...)
	b = append(b, d.Method...)
	b = append(b, `","path":"`...)
	b = append(b, d.Path...)
	b = append(b, `","port":`...)
	b = strconv.AppendInt(b, int64(d.Port), 10)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(d.Status), 10)
	return append(b, '}')
}

// plainJSONString reports whether json.Marshal writes s as is between quotes: printable
// ASCII without the characters it escapes (quote, backslash, and <, >, & for HTML).
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

func simpleJSONValue(v any) bool {
	switch v := v.(type) {
	case nil, bool, int, int64, int32, uint32:
		return true
	case string:
		return plainJSONString(v)
	case float64:
		return !math.IsNaN(v) && !math.IsInf(v, 0)
	}
	return false
}

// appendSimpleJSON appends v (simpleJSONValue) as encoding/json writes it.
func appendSimpleJSON(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, v)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case int32:
		return strconv.AppendInt(b, int64(v), 10)
	case uint32:
		return strconv.AppendUint(b, uint64(v), 10)
	case string:
		b = append(b, '"')
		b = append(b, v...)
		return append(b, '"')
	case float64:
		// encoding/json's float64 format: shortest, exponent only outside [1e-6, 1e21),
		// and e-07 written e-7.
		format := byte('f')
		if abs := math.Abs(v); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
			format = 'e'
		}
		b = strconv.AppendFloat(b, v, format, -1, 64)
		if format == 'e' {
			if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
				b[n-2] = b[n-1]
				b = b[:n-1]
			}
		}
		return b
	}
	panic("appendSimpleJSON: not a simple value") // simpleJSONValue checked it
}
