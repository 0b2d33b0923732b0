package guest

import (
	"encoding/json"
	"testing"
)

func TestLookup(t *testing.T) {
	doc := []byte(` { "id" : "e1", "n": -42, "ok": true, "esc\"key": 1,
		"data": {"port": 8080, "path": "/a\"b", "list": [1, {"x": "]"}], "deep": {"k": "v"}},
		"uni": "caf\u00e9 \ud83d\ude00", "empty": {} } `)
	tests := []struct {
		name string
		path []string
		want string
		ok   bool
	}{
		{"top-level string", []string{"id"}, `"e1"`, true},
		{"negative number", []string{"n"}, `-42`, true},
		{"literal", []string{"ok"}, `true`, true},
		{"escaped key", []string{`esc"key`}, `1`, true},
		{"nested", []string{"data", "port"}, `8080`, true},
		{"value with brackets in strings is skipped whole", []string{"data", "deep", "k"}, `"v"`, true},
		{"array value", []string{"data", "list"}, `[1, {"x": "]"}]`, true},
		{"missing", []string{"nope"}, "", false},
		{"missing nested", []string{"data", "nope"}, "", false},
		{"through a non-object", []string{"id", "x"}, "", false},
		{"empty object", []string{"empty"}, `{}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Lookup(doc, tt.path...)
			if ok != tt.ok || string(got) != tt.want {
				t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tt.path, got, ok, tt.want, tt.ok)
			}
		})
	}
	for _, bad := range []string{``, `[]`, `{"a"`, `{"a":}`, `{"a":"x`, `{"a":1 "b":2}`} {
		if got, ok := Lookup([]byte(bad), "b"); ok {
			t.Errorf("Lookup(%q, b) = %q, want not found", bad, got)
		}
	}
}

func TestStringAndInt(t *testing.T) {
	for _, raw := range []string{`"plain"`, `"a\"b\\c\/d\n\t"`, `"caf\u00e9 \ud83d\ude00"`, `""`} {
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatal(err)
		}
		if got, ok := String([]byte(raw)); !ok || got != want {
			t.Errorf("String(%s) = %q, %v; want %q", raw, got, ok, want)
		}
	}
	for _, bad := range []string{`plain`, `"x`, `"\q"`, `"\u12"`} {
		if got, ok := String([]byte(bad)); ok {
			t.Errorf("String(%s) = %q, want failure", bad, got)
		}
	}
	for raw, want := range map[string]int64{"0": 0, "8080": 8080, "-7": -7} {
		if got, ok := Int([]byte(raw)); !ok || got != want {
			t.Errorf("Int(%s) = %d, %v", raw, got, ok)
		}
	}
	for _, bad := range []string{"", "-", "1.5", "1e3", `"1"`, "99999999999999999999"} {
		if _, ok := Int([]byte(bad)); ok {
			t.Errorf("Int(%q) succeeded", bad)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"plain", `q"uote\`, "line\nbreak\ttab\r", "ctl\x01\x1f", "café 😀"} {
		raw := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(raw, &back); err != nil || back != s {
			t.Errorf("AppendString(%q) = %s, round trip %q, %v", s, raw, back, err)
		}
	}
}

func TestMembers(t *testing.T) {
	var got []string
	ok := Members([]byte(`{"a":1, "b\"c" : "x\\\"y" ,"d":{"e":[1,2]}}`), func(k, v []byte) bool {
		got = append(got, string(k)+"="+string(v))
		return true
	})
	want := []string{`a=1`, `b\"c="x\\\"y"`, `d={"e":[1,2]}`}
	if !ok || len(got) != len(want) {
		t.Fatalf("Members = %q, %v; want %q", got, ok, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("member %d = %q, want %q", i, got[i], want[i])
		}
	}
	if !Members([]byte(` { } `), func(k, v []byte) bool { t.Error("member in empty object"); return true }) {
		t.Error("empty object reported malformed")
	}
}
