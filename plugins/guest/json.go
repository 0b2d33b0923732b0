package guest

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// The helpers below read and write JSON without reflection and almost
// without allocating. They exist because a plugin's cost is dominated by
// allocation and by the host's termination checks (see ABI.md): decoding a
// decide_ttl input with encoding/json costs tens of times more than finding
// its few fields with Lookup. They compile on every platform, so they are
// tested natively.

// Lookup returns the raw JSON value found by following path (object keys)
// from the object doc, or false when a key is missing or doc is malformed
// along the way. The result aliases doc.
func Lookup(doc []byte, path ...string) ([]byte, bool) {
	v := doc
	for _, key := range path {
		var ok bool
		if v, ok = member(v, key); !ok {
			return nil, false
		}
	}
	start := skipSpace(v, 0)
	end := len(v)
	for end > start && isSpace(v[end-1]) {
		end--
	}
	return v[start:end], end > start
}

// String decodes a raw JSON string value.
func String(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' {
			return unescape(inner)
		}
	}
	return string(inner), true
}

// Int decodes a raw JSON number that is an integer.
func Int(raw []byte) (int64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	neg := raw[0] == '-'
	digits := raw
	if neg {
		digits = raw[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// Bool reports whether raw is the JSON literal true.
func Bool(raw []byte) bool { return string(raw) == "true" }

// AppendString appends s to dst as a JSON string literal.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// Members calls fn with each member of the object obj in order, the key
// still escaped as in the document (without quotes) and the raw value,
// until fn returns false. Reading all wanted fields in one pass is cheaper
// than one Lookup per field. It reports false when obj is malformed.
func Members(obj []byte, fn func(key, value []byte) bool) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return true
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return false
		}
		keyEnd, ok := skipString(obj, i)
		if !ok {
			return false
		}
		key := obj[i+1 : keyEnd-1]
		i = skipSpace(obj, keyEnd)
		if i >= len(obj) || obj[i] != ':' {
			return false
		}
		valueStart := skipSpace(obj, i+1)
		valueEnd, ok := skipValue(obj, valueStart)
		if !ok {
			return false
		}
		if !fn(key, obj[valueStart:valueEnd]) {
			return true
		}
		i = skipSpace(obj, valueEnd)
		if i < len(obj) && obj[i] == '}' {
			return true
		}
		if i >= len(obj) || obj[i] != ',' {
			return false
		}
		i = skipSpace(obj, i+1)
	}
}

// member returns the raw value of key in the object obj.
func member(obj []byte, key string) (value []byte, found bool) {
	Members(obj, func(k, v []byte) bool {
		if keyEquals(k, key) {
			value, found = v, true
			return false
		}
		return true
	})
	return value, found
}

// keyEquals compares a key as Members passes it with key.
func keyEquals(inner []byte, key string) bool {
	for _, c := range inner {
		if c == '\\' {
			s, ok := unescape(inner)
			return ok && s == key
		}
	}
	return string(inner) == key
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
// It jumps from quote to quote with bytes.IndexByte, which scans a word at
// a time even in WebAssembly, and counts the backslashes before each quote.
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return 0, false
		}
		j += q
		escapes := 0
		for k := j - 1; k > i && b[k] == '\\'; k-- {
			escapes++
		}
		if escapes%2 == 0 {
			return j + 1, true
		}
		j++
	}
	return 0, false
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isSpace(b[j]) {
			j++
		}
		return j, j > i
	}
}

// unescape decodes the inside of a JSON string literal.
func unescape(s []byte) (string, bool) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(s) {
			return "", false
		}
		switch s[i] {
		case '"', '\\', '/':
			out = append(out, s[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s, i+1)
			if !ok {
				return "", false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					if r2, ok := hex4(s, i+3); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							r = dec
							i += 6
						}
					}
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	return string(out), true
}

func hex4(s []byte, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
