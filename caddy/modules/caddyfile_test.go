package modules

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// adapt turns a Caddyfile into Caddy's JSON config, indented, as `sandgate adapt` does.
func adapt(t *testing.T, src []byte) ([]byte, error) {
	t.Helper()
	adapter := caddyconfig.GetAdapter("caddyfile")
	out, _, err := adapter.Adapt(src, map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "\t"); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// TestCaddyfileGolden adapts every testdata/caddyfile/*.caddyfile (each directive and
// every global option) and compares the JSON with its golden file; -update rewrites them.
func TestCaddyfileGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/caddyfile/*.caddyfile")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	cases := map[string][]byte{"default": DefaultCaddyfile}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cases[strings.TrimSuffix(filepath.Base(f), ".caddyfile")] = src
	}
	// The default Caddyfile reads the environment: a clean one gives its defaults.
	for _, s := range settings {
		t.Setenv(s.env, "")
		os.Unsetenv(s.env)
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := adapt(t, src)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			golden := filepath.Join("testdata", "caddyfile", name+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("adapted JSON differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

// TestGoldenCoversEverySetting: every_setting.caddyfile sets each setting of the table,
// so the golden test covers every global option.
func TestGoldenCoversEverySetting(t *testing.T) {
	src, err := os.ReadFile("testdata/caddyfile/every_setting.caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, l := range sandgateBlock(t, src) {
		name, _, _ := strings.Cut(l, " ")
		set[name] = true
	}
	for _, s := range settings {
		if !set[s.name] {
			t.Errorf("every_setting.caddyfile does not set %s", s.name)
		}
	}
}

// TestCaddyfileErrors: a Caddyfile mistake is refused at adapt time with the setting named.
func TestCaddyfileErrors(t *testing.T) {
	tests := []struct {
		name, block, want string
	}{
		{"unknown setting", "sandgate {\n\tmax_timout 1h\n}", `unknown sandgate setting "max_timout"`},
		{"two values", "sandgate {\n\tredis_prefix a b\n}", "wrong argument count"},
		{"bad duration", "sandgate {\n\tmax_timeout soon\n}", "max_timeout:"},
		{"negative duration", "sandgate {\n\tpool_wait -1s\n}", "pool_wait: must not be negative"},
		{"zero integer", "sandgate {\n\tpool_concurrency 0\n}", "pool_concurrency: want a positive integer"},
		{"word as integer", "sandgate {\n\tk8s_qps many\n}", "k8s_qps: want a positive integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := adapt(t, []byte("{\n"+tt.block+"\n}\nhttp://:8080 {\n\tsandgate\n}\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("adapt error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	t.Run("handler with an argument", func(t *testing.T) {
		_, err := adapt(t, []byte("http://:8080 {\n\tsandgate extra\n}\n"))
		if err == nil || !strings.Contains(err.Error(), "wrong argument count") {
			t.Fatalf("adapt error = %v, want a wrong argument count", err)
		}
	})
}

// TestDefaultCaddyfileMatchesSettings: the default Caddyfile's sandgate block is the
// settings table, line for line: each setting read from its variable with its default,
// secrets as {env.VAR} placeholders.
func TestDefaultCaddyfileMatchesSettings(t *testing.T) {
	block := sandgateBlock(t, DefaultCaddyfile)
	var want []string
	for _, s := range settings {
		want = append(want, s.name+" "+s.caddyfileValue())
	}
	if diff := cmp.Diff(want, block); diff != "" {
		t.Errorf("caddy/modules/Caddyfile's sandgate block differs from the settings table (-table +Caddyfile):\n%s", diff)
	}
}

// sandgateBlock returns the lines of the `sandgate` global option block, comments dropped.
func sandgateBlock(t *testing.T, src []byte) []string {
	t.Helper()
	var lines []string
	in := false
	for _, l := range strings.Split(string(src), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "sandgate {":
			in = true
		case in && l == "}":
			return lines
		case in && l != "" && !strings.HasPrefix(l, "#"):
			lines = append(lines, l)
		}
	}
	t.Fatal("no sandgate block in the default Caddyfile")
	return nil
}
