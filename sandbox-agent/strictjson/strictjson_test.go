package strictjson

import (
	"errors"
	"testing"
)

type doc struct {
	A int   `json:"a"`
	B []int `json:"b"`
}

func TestDecode(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       error // nil: decoded; ErrTrailingData; errAny: some other error
	}{
		{"object", `{"a": 1, "b": [2]}`, nil},
		{"white space around", " \n\t{\"a\": 1}\r\n ", nil},
		{"stray closing brace", `{"a": 1}}`, ErrTrailingData},
		{"stray closing bracket", `{"a": 1}]`, ErrTrailingData},
		{"stray bracket after white space", "{\"a\": 1}\n]", ErrTrailingData},
		{"second value", `{"a": 1}{"a": 2}`, ErrTrailingData},
		{"garbage", `{"a": 1}x`, ErrTrailingData},
		{"comma", `{"a": 1},`, ErrTrailingData},
		{"unknown field", `{"a": 1, "c": 3}`, errAny},
		{"malformed", `{"a": }`, errAny},
		{"empty", ``, errAny},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			err := Decode([]byte(tt.body), &d)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("Decode(%q) = %v, want success", tt.body, err)
			case tt.want == ErrTrailingData && !errors.Is(err, ErrTrailingData):
				t.Fatalf("Decode(%q) = %v, want ErrTrailingData", tt.body, err)
			case tt.want == errAny && (err == nil || errors.Is(err, ErrTrailingData)):
				t.Fatalf("Decode(%q) = %v, want a decode error", tt.body, err)
			}
		})
	}

	var arr []int
	if err := Decode([]byte(`[1, 2]]`), &arr); !errors.Is(err, ErrTrailingData) {
		t.Fatalf("an array with a stray ']': %v, want ErrTrailingData", err)
	}
}

var errAny = errors.New("any decode error")
