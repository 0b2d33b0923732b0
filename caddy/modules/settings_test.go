package modules

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/inprocess"
)

// TestSettingsCoverEveryField: every JSON field of App is a setting of the table,
// pointing at that very field, so none escapes the parser, the docs or coreKey.
func TestSettingsCoverEveryField(t *testing.T) {
	var a App
	v := reflect.ValueOf(&a).Elem()
	fields := map[string]bool{}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = true
		s, ok := settingNamed(name)
		if !ok {
			t.Errorf("App field %s (json %q) is not in the settings table", f.Name, name)
			continue
		}
		if reflect.ValueOf(s.field(&a)).Pointer() != v.Field(i).Addr().Pointer() {
			t.Errorf("setting %s points at another field than %s", name, f.Name)
		}
	}
	for _, s := range settings {
		if !fields[s.name] {
			t.Errorf("setting %s has no App field", s.name)
		}
	}
}

// mutate changes the setting's value in a to another valid one.
func mutate(s setting, a *App) {
	switch p := s.field(a).(type) {
	case *string:
		*p = "changed"
		if len(s.values) > 0 {
			*p = s.values[len(s.values)-1]
			if *p == "" || *p == s.def {
				*p = s.values[0]
			}
		}
	case *[]string:
		*p = append(*p, "changed")
	case *caddy.Duration:
		*p += caddy.Duration(time.Second)
	case *int:
		*p++
	}
}

// TestCoreKeyCoversEverySetting: changing any setting but the live ones (applied to the
// running core) changes coreKey, so a reload rebuilds the core.
func TestCoreKeyCoversEverySetting(t *testing.T) {
	base := new(App).coreKey()
	for _, s := range settings {
		a := new(App)
		mutate(s, a)
		changed := a.coreKey() != base
		if changed == s.live {
			t.Errorf("setting %s: coreKey changed=%v, live=%v", s.name, changed, s.live)
		}
	}
}

// TestConfigurationDocumentsEverySetting: each setting's variable has a row in one of the
// tables of docs/configuration.md, and that row names the default the default Caddyfile
// gives it.
func TestConfigurationDocumentsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // variable -> default column
	for _, line := range strings.Split(string(readme), "\n") {
		cols := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `SANDGATE_") || len(cols) < 3 {
			continue
		}
		for _, v := range regexp.MustCompile("`(SANDGATE_[A-Z0-9_]+)`").FindAllStringSubmatch(cols[0], -1) {
			rows[v[1]] = cols[1]
		}
	}
	for _, s := range settings {
		def, ok := rows[s.env]
		if !ok {
			t.Errorf("docs/configuration.md has no row for %s (setting %s)", s.env, s.name)
			continue
		}
		if s.def != "" && !strings.Contains(def, "`"+s.def+"`") {
			t.Errorf("docs/configuration.md's row for %s gives the default %q, want one naming `%s`", s.env, def, s.def)
		}
	}
}

// TestValidate: a JSON config (which no Caddyfile parsing checked) with a value the core
// cannot run with is refused, naming the setting.
func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		json string
		want string
	}{
		{"valid", `{"runtime":"docker","egress":"on","max_timeout":60000000000}`, ""},
		{"unknown runtime", `{"runtime":"lxc"}`, `unknown runtime "lxc"`},
		{"egress", `{"egress":"maybe"}`, "egress"},
		{"pool fallback", `{"pool_fallback":"warm"}`, "pool_fallback"},
		{"default action", `{"egress_default_action":"drop"}`, "egress_default_action"},
		{"read only rootfs", `{"read_only_rootfs":"yes"}`, "read_only_rootfs"},
		{"image pull", `{"image_pull":"sometimes"}`, "image_pull"},
		{"sandbox dns", `{"sandbox_dns":["192.0.2.53","198.51.100.53"]}`, ""},
		{"sandbox dns not an address", `{"sandbox_dns":["dns.example"]}`, "sandbox_dns"},
		{"sandbox dns IPv6", `{"sandbox_dns":["2001:db8::53"]}`, "sandbox_dns"},
		{"sandbox dns loopback", `{"sandbox_dns":["127.0.0.53"]}`, "sandbox_dns"},
		{"vault schemes", `{"vault_schemes":["https","http"]}`, ""},
		{"vault scheme unknown", `{"vault_schemes":["https","ftp"]}`, "vault_schemes"},
		{"negative duration", `{"pool_wait":-1}`, "pool_wait: must not be negative"},
		{"negative integer", `{"k8s_qps":-3}`, "k8s_qps"},
		{"public url", `{"public_url":"ftp://x"}`, "public_url"},
		{"cluster id", `{"cluster_id":"not a label!"}`, "cluster"},
		{"require timeout", `{"require_timeout":"yes"}`, "require_timeout"},
		{"default timeout", `{"default_timeout":3600000000000}`, "require_timeout on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a App
			if err := json.Unmarshal([]byte(tt.json), &a); err != nil {
				t.Fatal(err)
			}
			err := a.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestReloadAppliesEverySetting loads a config, then reloads it with one setting the
// old coreKey left out changed (max_timeout, preview_domain, oci_runtime): the running
// core must be a new one with the new value, and the embedded store, shared across the
// rebuild, must still hold what was written before. A reload changing only the admin
// key keeps the core.
func TestReloadAppliesEverySetting(t *testing.T) {
	runtimeBuilders["inprocess"] = func(context.Context, *App, *slog.Logger) (runtimes.Runtime, error) {
		return inprocess.New(), nil
	}
	t.Cleanup(func() { delete(runtimeBuilders, "inprocess") })
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	prefix := "sg-reload-" + time.Now().Format("150405.000000") + ":"
	load := func(app map[string]any) *App {
		t.Helper()
		app["runtime"] = "inprocess"
		app["redis_prefix"] = prefix
		app["egress"] = "off"
		cfg, _ := json.Marshal(map[string]any{
			"admin": map[string]any{"disabled": true, "config": map[string]any{"persist": false}},
			"apps":  map[string]any{"sandgate": app},
		})
		if err := caddy.Load(cfg, true); err != nil {
			t.Fatalf("load: %v", err)
		}
		got, err := caddy.ActiveContext().App("sandgate")
		if err != nil {
			t.Fatal(err)
		}
		return got.(*App)
	}
	t.Cleanup(func() { _ = caddy.Stop() })

	first := load(map[string]any{"max_timeout": int64(time.Hour), "api_key": "k1"})
	if got := first.core.service.Config().MaxTimeout; got != time.Hour {
		t.Fatalf("first core's MaxTimeout = %s", got)
	}
	ctx := context.Background()
	if err := first.core.store.Client().Set(ctx, prefix+"probe", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		app   map[string]any
		check func(*App) bool
	}{
		{"max_timeout", map[string]any{"max_timeout": int64(2 * time.Hour), "api_key": "k1"},
			func(a *App) bool { return a.core.service.Config().MaxTimeout == 2*time.Hour }},
		{"preview_domain", map[string]any{"max_timeout": int64(2 * time.Hour), "api_key": "k1", "preview_domain": "preview.example"},
			func(a *App) bool { return a.core.service.Config().PreviewDomain == "preview.example" }},
		{"renew_cooldown", map[string]any{"max_timeout": int64(2 * time.Hour), "api_key": "k1", "preview_domain": "preview.example", "renew_cooldown": int64(5 * time.Minute)},
			func(a *App) bool { return a.core.service.Config().RenewCooldown == 5*time.Minute }},
	}
	prev := first.core
	for _, st := range steps {
		a := load(st.app)
		if !st.check(a) {
			t.Fatalf("after a reload changing %s the core runs with %+v", st.name, a.core.service.Config())
		}
		if a.core == prev {
			t.Fatalf("a reload changing %s kept the old core", st.name)
		}
		if v, err := a.core.store.Client().Get(ctx, prefix+"probe").Result(); err != nil || v != "kept" {
			t.Fatalf("after rebuilding the core for %s the store lost its data: %q, %v", st.name, v, err)
		}
		prev = a.core
	}
	last := slices.Clone(steps)[len(steps)-1].app
	last["api_key"] = "k2"
	if a := load(last); a.core != prev {
		t.Fatal("a reload changing only the admin key rebuilt the core")
	}
}

// TestSettingDefaultsAreTheCore: the defaults the settings table gives (the default
// Caddyfile's) are the ones the core takes for a zero value (gateway.Config.Defaults),
// so that a gateway configured by JSON without them behaves as the Caddyfile's.
func TestSettingDefaultsAreTheCore(t *testing.T) {
	var a App
	for _, s := range settings {
		if err := s.parse(&a, s.def); err != nil {
			t.Fatalf("%s: default %q: %v", s.name, s.def, err)
		}
	}
	fromSettings := a.gatewayConfig(0)
	zero := a.gatewayConfig(0)
	zero.MinTimeout, zero.MaxTimeout, zero.ReadyTimeout, zero.FailedRetention, zero.SyncInterval = 0, 0, 0, 0, 0
	zero.PoolWait, zero.RenewCooldown, zero.PoolFallback, zero.PoolConcurrency, zero.AgentIdleTimeout = 0, 0, "", 0, 0
	core := zero
	core.Defaults()
	withDefaults := fromSettings
	withDefaults.Defaults()
	if diff := cmp.Diff(core, withDefaults); diff != "" {
		t.Errorf("the settings' defaults (+) differ from the core's (-):\n%s", diff)
	}
}
