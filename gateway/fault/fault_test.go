package fault

import (
	"errors"
	"fmt"
	"testing"
)

// TestError: an *Error reads as its code and message (and its cause, for the logs), is
// found through any wrapping, and hands its cause to errors.Is.
func TestError(t *testing.T) {
	cause := errors.New("redis: connection refused")
	tests := []struct {
		name string
		err  *Error
		text string
	}{
		{"without a cause", Errorf(KindForbidden, CodeForbidden, "only the %s", "admin"), "FORBIDDEN: only the admin"},
		{"with a cause", &Error{Kind: KindUnavailable, Code: "STORE::UNAVAILABLE", Message: "retry", Cause: cause}, "STORE::UNAVAILABLE: retry: redis: connection refused"},
		{"a sandbox not found", NotFound("sb1"), "SANDBOX::NOT_FOUND: sandbox sb1 not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.text {
				t.Fatalf("Error() = %q, want %q", got, tt.text)
			}
			got, ok := AsError(fmt.Errorf("context: %w", tt.err))
			if !ok || got != tt.err {
				t.Fatalf("AsError through wrapping = %v, %v", got, ok)
			}
			if errors.Is(tt.err, cause) != (tt.err.Cause != nil) {
				t.Fatal("errors.Is does not follow the cause")
			}
		})
	}
	if _, ok := AsError(cause); ok {
		t.Fatal("AsError found an *Error in a plain error")
	}
}
