package sandgate

import (
	"os"
	"path/filepath"
	"testing"
)

// TestConfigPrecedence: the stored login is the default, the environment overrides it
// field by field, and the file is the user's alone.
func TestConfigPrecedence(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", home)
	t.Setenv("SANDGATE_URL", "")
	t.Setenv("SANDGATE_API_KEY", "")
	if cfg, err := LoadConfig(); err != nil || cfg != (Config{}) {
		t.Fatalf("no login: %+v, %v", cfg, err)
	}
	path, err := SaveConfig(Config{URL: "http://127.0.0.1:1", Key: "stored"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(home, "sandgate", "config.json"); path != want {
		t.Fatalf("saved to %s, want %s", path, want)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config mode: %v, %v", st.Mode(), err)
	}
	tests := []struct {
		name, envURL, envKey string
		want                 Config
	}{
		{"stored", "", "", Config{URL: "http://127.0.0.1:1", Key: "stored"}},
		{"key from env", "", "env", Config{URL: "http://127.0.0.1:1", Key: "env"}},
		{"url from env", "http://127.0.0.1:2", "", Config{URL: "http://127.0.0.1:2", Key: "stored"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("SANDGATE_URL", tt.envURL)
			t.Setenv("SANDGATE_API_KEY", tt.envKey)
			cfg, err := LoadConfig()
			if err != nil || cfg != tt.want {
				t.Fatalf("LoadConfig = %+v, %v; want %+v", cfg, err, tt.want)
			}
		})
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(); err == nil {
		t.Fatal("a corrupt config loaded")
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := New(u, "k"); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	c, err := New("http://127.0.0.1:8080/v1/", "k")
	if err != nil || c.BaseURL() != "http://127.0.0.1:8080" {
		t.Fatalf("New with /v1/: %v, %v", c, err)
	}
}
