package shellsession

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type line struct{ Stream, Text string }

func run(t *testing.T, s *Session, script, cwd string, timeout time.Duration) ([]line, Result, error) {
	t.Helper()
	var (
		mu  sync.Mutex
		out []line
	)
	res, err := s.Run(context.Background(), script, cwd, timeout, func(stream, text string, _ bool) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, line{stream, text})
		return nil
	})
	return out, res, err
}

func TestSessionRuns(t *testing.T) {
	dir := t.TempDir()
	s, err := Start(dir, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	tests := []struct {
		name   string
		script string
		cwd    string
		want   []line
		code   int
	}{
		{"state is kept (1)", "cd / && export V=kept", "", nil, 0},
		{"state is kept (2)", "pwd; echo $V", "", []line{{"stdout", "/"}, {"stdout", "kept"}}, 0},
		{"interleaved streams", "echo out; echo err >&2", "", []line{{"stdout", "out"}, {"stderr", "err"}}, 0},
		{"no trailing newline", "printf x; printf y >&2", "", []line{{"stdout", "x"}, {"stderr", "y"}}, 0},
		{"blank lines", "printf '\\n\\nz\\n\\n'", "", []line{{"stdout", ""}, {"stdout", ""}, {"stdout", "z"}, {"stdout", ""}}, 0},
		{"marker-like text is output", "echo __SANDGATE_END_fake__0", "", []line{{"stdout", "__SANDGATE_END_fake__0"}}, 0},
		{"exit status", "(exit 12)", "", nil, 12},
		{"quotes in script", `echo "it's" 'a "test"'`, "", []line{{"stdout", `it's a "test"`}}, 0},
		{"per-run cwd", "pwd", dir, []line{{"stdout", dir}}, 0},
		{"cwd restored", "pwd", "", []line{{"stdout", "/"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, res, err := run(t, s, tt.script, tt.cwd, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Order between stdout and stderr is not defined; compare per stream.
			split := func(ls []line) (o, e []line) {
				for _, l := range ls {
					if l.Stream == "stdout" {
						o = append(o, l)
					} else {
						e = append(e, l)
					}
				}
				return
			}
			gotOut, gotErr := split(out)
			wantOut, wantErr := split(tt.want)
			if diff := cmp.Diff(wantOut, gotOut); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantErr, gotErr); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			if res.ExitCode != tt.code {
				t.Errorf("exit code %d, want %d", res.ExitCode, tt.code)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		_, res, err := run(t, s, "sleep 100", "", 200*time.Millisecond)
		if err != nil || !res.TimedOut || res.ExitCode != 137 || time.Since(start) > 2*time.Second {
			t.Fatalf("res %+v err %v after %v", res, err, time.Since(start))
		}
	})
	t.Run("long line is delivered whole", func(t *testing.T) {
		out, _, err := run(t, s, "head -c 200000 /dev/zero | tr '\\0' 'q'; echo", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, l := range out {
			b.WriteString(l.Text)
		}
		if b.String() != strings.Repeat("q", 200000) {
			t.Fatalf("got %d bytes in %d pieces", b.Len(), len(out))
		}
	})
	t.Run("exit closes the session", func(t *testing.T) {
		_, res, err := run(t, s, "exit 3", "", 0)
		if !errors.Is(err, ErrClosed) || res.ExitCode != 3 || s.Alive() {
			t.Fatalf("res %+v err %v alive %v", res, err, s.Alive())
		}
		if _, _, err := run(t, s, "true", "", 0); !errors.Is(err, ErrClosed) {
			t.Fatalf("run after exit: %v", err)
		}
	})
}
