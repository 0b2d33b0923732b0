package pool

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sandgate/sandgate/gateway/createreq"
	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
)

var defaultCaller = principal.Caller{Tenant: "default", Admin: true}

func template(image string) *createreq.Request {
	return &createreq.Request{Image: &createreq.ImageSpec{URI: image}}
}

func codeOf(err error) string {
	if e, ok := fault.AsError(err); ok {
		return e.Code
	}
	return ""
}

// TestDefineRefuses: a pool request is checked whole before anything is stored.
func TestDefineRefuses(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{MaxPoolSize: 10})
	s.host.building = "building:1"
	ok := store.Capacity{BufferMin: 1, BufferMax: 2, PoolMax: 4}
	claims := template("img")
	claims.Extensions = map[string]string{"poolRef": "other"}
	volumes := template("img")
	volumes.Volumes = json.RawMessage(`[{"name":"v"}]`)
	for _, tt := range []struct {
		name string
		req  Request
		code string
	}{
		{"bad name", Request{Name: "Bad_Name", Template: template("img"), CapacitySpec: ok}, CodeInvalid},
		{"no template", Request{Name: "p", CapacitySpec: ok}, CodeInvalid},
		{"a template that claims", Request{Name: "p", Template: claims, CapacitySpec: ok}, CodeInvalid},
		{"the core refuses the template", Request{Name: "p", Template: template(""), CapacitySpec: ok}, fault.CodeInvalidParameter},
		{"volumes", Request{Name: "p", Template: volumes, CapacitySpec: ok}, CodeInvalid},
		{"negative", Request{Name: "p", Template: template("img"), CapacitySpec: store.Capacity{BufferMin: -1}}, CodeInvalid},
		{"buffer bounds", Request{Name: "p", Template: template("img"), CapacitySpec: store.Capacity{BufferMin: 3, BufferMax: 2, PoolMax: 4}}, CodeInvalid},
		{"pool bounds", Request{Name: "p", Template: template("img"), CapacitySpec: store.Capacity{PoolMin: 5, PoolMax: 4}}, CodeInvalid},
		{"buffer above pool", Request{Name: "p", Template: template("img"), CapacitySpec: store.Capacity{BufferMax: 5, PoolMax: 4}}, CodeInvalid},
		{"above the gateway's limit", Request{Name: "p", Template: template("img"), CapacitySpec: store.Capacity{PoolMax: 11}}, CodeInvalid},
		{"unknown snapshot", Request{Name: "p", Template: &createreq.Request{SnapshotID: "nope"}, CapacitySpec: ok}, "SNAPSHOT::NOT_FOUND"},
		{"image still building", Request{Name: "p", Template: template("building:1"), CapacitySpec: ok}, "SANDBOX::IMAGE_BUILDING"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.m.Create(ctx, defaultCaller, tt.req)
			if codeOf(err) != tt.code {
				t.Fatalf("Create = %v, want %s", err, tt.code)
			}
		})
	}
	if pools, err := s.d.Store.ListPools(ctx, "default"); err != nil || len(pools) != 0 {
		t.Fatalf("refused requests stored %d pools (%v)", len(pools), err)
	}
}

// TestDefineAndUpdate: a pool is stored with its template as answered (no registry
// credentials, no nulls), once; an update of its capacity keeps its version, one of its
// template makes a new version.
func TestDefineAndUpdate(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{MaxPoolSize: 10})
	s.host.snapshots = map[string]string{"snap-1": "snapshot-image:1"}
	s.host.building = "building:1"
	tmpl := template("img")
	tmpl.Image.Auth = &createreq.ImageAuth{Username: "u", Password: "secret"}
	tmpl.NetworkPolicy = json.RawMessage(" null")
	capacity := store.Capacity{BufferMin: 0, BufferMax: 0, PoolMax: 4}
	v, err := s.m.Create(ctx, defaultCaller, Request{Name: "warm", Template: tmpl, CapacitySpec: capacity})
	if err != nil {
		t.Fatal(err)
	}
	var stored map[string]any
	if err := json.Unmarshal(v.Template, &stored); err != nil {
		t.Fatal(err)
	}
	if img, _ := stored["image"].(map[string]any); img["uri"] != "img" || img["auth"] != nil {
		t.Fatalf("stored image %v: want its uri without credentials", stored["image"])
	}
	if _, ok := stored["networkPolicy"]; ok {
		t.Fatal("a null networkPolicy was stored")
	}
	if _, err := s.m.Create(ctx, defaultCaller, Request{Name: "warm", Template: template("img"), CapacitySpec: capacity}); codeOf(err) != CodeExists {
		t.Fatalf("a second create: %v, want %s", err, CodeExists)
	}

	if _, err := s.m.Update(ctx, defaultCaller, "warm", Request{Name: "cold", Template: template("img"), CapacitySpec: capacity}); codeOf(err) != CodeInvalid {
		t.Fatalf("a body naming another pool: %v", err)
	}
	if _, err := s.m.Update(ctx, defaultCaller, "missing", Request{Template: template("img"), CapacitySpec: capacity}); codeOf(err) != CodeNotFound {
		t.Fatalf("an unknown pool: %v", err)
	}
	if _, err := s.m.Update(ctx, defaultCaller, "warm", Request{Template: template("img")}); err != nil {
		t.Fatalf("a new capacity: %v", err)
	}
	p, err := s.m.Lookup(ctx, defaultCaller, "warm")
	if err != nil || p.Version != 1 || p.Capacity.PoolMax != 0 {
		t.Fatalf("after a capacity change: version %d, poolMax %d (%v)", p.Version, p.Capacity.PoolMax, err)
	}
	if _, err := s.m.Update(ctx, defaultCaller, "warm", Request{Template: template("building:1"), CapacitySpec: capacity}); codeOf(err) != "SANDBOX::IMAGE_BUILDING" {
		t.Fatalf("a template of an image still building: %v", err)
	}
	v, err = s.m.Update(ctx, defaultCaller, "warm", Request{Name: "warm", Template: &createreq.Request{SnapshotID: "snap-1"}, CapacitySpec: capacity})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := s.m.Lookup(ctx, defaultCaller, "warm"); p.Version != 2 {
		t.Fatalf("a new template kept version %d", p.Version)
	}
	if err := json.Unmarshal(v.Template, &stored); err != nil {
		t.Fatal(err)
	}
	if img, _ := stored["image"].(map[string]any); img["uri"] != "snapshot-image:1" || stored["snapshotId"] != nil {
		t.Fatalf("a snapshot's template stored as %v", stored)
	}
}

// TestDefinePulls: a pool whose image the engine lacks starts its one pull, with the
// template's registry credentials, and an update to an image it has clears it.
func TestDefinePulls(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{MaxPoolSize: 10})
	cfg := s.m.cfg
	cfg.PullImages = true
	m := New(cfg, s.d.Store, imageRuntime{Runtime: s.d.Runtime}, s.host, s.d.Log)
	t.Cleanup(m.Stop)
	tmpl := template("img")
	tmpl.Image.Auth = &createreq.ImageAuth{Username: "u", Password: "p"}
	if got := imageAuth(tmpl); got == nil || got.Username != "u" {
		t.Fatalf("imageAuth = %v", got)
	}
	if got := imageAuth(template("img")); got != nil {
		t.Fatalf("imageAuth of a template without credentials = %v", got)
	}
	v, err := m.Create(ctx, defaultCaller, Request{Name: "pulled", Template: tmpl, CapacitySpec: store.Capacity{PoolMax: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Status.Image == nil {
		t.Fatal("a pool whose image is missing shows no pull")
	}
	v, err = m.Update(ctx, defaultCaller, "pulled", Request{Template: template("other"), CapacitySpec: store.Capacity{PoolMax: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Status.Image == nil {
		t.Fatal("a new image missing on the engine shows no pull")
	}
}
