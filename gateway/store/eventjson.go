package store

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
)

// encodeEvent is json.Marshal(ev), byte for byte, without reflection when every value
// is one the hot paths put in events (plain strings, integers, finite floats, bools):
// the proxy queues an event per request, and reflecting over its data map was most of
// the batched writer's CPU. Anything else (a string that needs escaping, a nested
// value) goes to json.Marshal.
func encodeEvent(ev Event) ([]byte, error) {
	var keyArr [12]string
	keys := keyArr[:0]
	for k, v := range ev.Data {
		if !plainJSONString(k) || !simpleJSONValue(v) {
			return json.Marshal(ev)
		}
		keys = append(keys, k)
	}
	if !plainJSONString(ev.ID) || !plainJSONString(ev.Type) || !plainJSONString(ev.Tenant) || !plainJSONString(ev.SandboxID) {
		return json.Marshal(ev)
	}
	slices.Sort(keys)
	b := make([]byte, 0, 160+32*len(keys))
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
		return json.Marshal(ev)
	}
	b = append(b, '"')
	if len(ev.Data) > 0 {
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
	return append(b, '}'), nil
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
