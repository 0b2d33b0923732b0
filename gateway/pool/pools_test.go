package pool

import (
	"context"
	"errors"
	"testing"

	"github.com/sandgate/sandgate/gateway/fault"
	"github.com/sandgate/sandgate/gateway/principal"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/runtimes/inprocess"
)

// imageRuntime is the in-process runtime with an image store that has the image or
// not, and a registry that refuses on demand: the in-process runtime runs no images.
type imageRuntime struct {
	*inprocess.Runtime
	has         bool
	registryErr error
}

func (r imageRuntime) HasImage(context.Context, string, string) (bool, error) { return r.has, nil }
func (r imageRuntime) CheckRegistry(context.Context, string) error            { return r.registryErr }
func (r imageRuntime) Pull(context.Context, string, *runtimes.ImageAuth, func(runtimes.PullProgress)) error {
	return nil
}

var _ runtimes.ImagePuller = imageRuntime{}

// TestPrepareImage: a new pool's image is checked, pulled, or refused by the runtime's
// abilities and the pull settings.
func TestPrepareImage(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	refused := errors.New("registry refused")
	tests := []struct {
		name       string
		rt         runtimes.Runtime
		pull, all  bool
		wantPuller bool
		wantErr    string
	}{
		{"no image abilities", s.d.Runtime, true, false, false, ""},
		{"pull off, image present", imageRuntime{Runtime: s.d.Runtime, has: true}, false, false, false, ""},
		{"pull off, image missing", imageRuntime{Runtime: s.d.Runtime}, false, false, false, "image img: " + runtimes.ErrImageNotFound.Error()},
		{"pull missing, image present", imageRuntime{Runtime: s.d.Runtime, has: true}, true, false, false, ""},
		{"pull missing, image missing", imageRuntime{Runtime: s.d.Runtime}, true, false, true, ""},
		{"pull always", imageRuntime{Runtime: s.d.Runtime, has: true}, true, true, true, ""},
		{"registry refused", imageRuntime{Runtime: s.d.Runtime, registryErr: refused}, true, false, false, "image img: registry refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := s.m.cfg
			cfg.PullImages, cfg.PullAlways = tt.pull, tt.all
			m := New(cfg, s.d.Store, tt.rt, s.host, s.d.Log)
			ip, err := m.PrepareImage(ctx, "default", "img")
			if (ip != nil) != tt.wantPuller {
				t.Errorf("puller %v, want one: %v", ip, tt.wantPuller)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestStatusAndDelete: a pool's numbers count warm, claimed and starting members;
// deleting it removes the warm ones and leaves the claimed.
func TestStatusAndDelete(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	p := s.putPool(t, "p", store.Capacity{BufferMin: 2, BufferMax: 2, PoolMax: 3})
	s.m.refillOnce(ctx)
	s.waitAvailable(t, p, 2)
	claimed := s.claim(t, p, nil)
	st, err := s.m.Status(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Available != 1 || st.Allocated != 1 || st.Total != st.Available+st.Allocated+st.Starting || st.Image != nil {
		t.Fatalf("status %+v, want 1 available, 1 allocated, no image pull", st)
	}
	warm, _ := s.d.Store.ReadyMembers(ctx, p.Tenant, p.Name)
	if err := s.m.Delete(ctx, principal.Caller{Tenant: p.Tenant}, p.Name); err != nil {
		t.Fatal(err)
	}
	for _, id := range warm {
		s.waitGone(t, id)
	}
	if _, err := s.d.Runtime.Inspect(ctx, claimed.ID); err != nil {
		t.Errorf("the claimed member went with its pool: %v", err)
	}
	if _, err := s.d.Store.GetPool(ctx, p.Tenant, p.Name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("pool still stored: %v", err)
	}
}

// TestPoolsAsTheCallerSeesThem: a pool is found, read, listed and deleted only by its
// tenant's callers (another tenant's is not found); the platform admin acting for a
// tenant also finds the default tenant's pools; the view carries the stored template,
// capacity and live numbers.
func TestPoolsAsTheCallerSeesThem(t *testing.T) {
	ctx := context.Background()
	s := startManager(t, Config{})
	shared := s.putPool(t, "shared", store.Capacity{BufferMax: 1, PoolMax: 1}) // the default tenant's
	own := &store.Pool{Tenant: "acme", Name: "own", Template: []byte(`{"image":{"uri":"base:1"}}`), Capacity: store.Capacity{PoolMax: 2}, Version: 1, CreatedAt: "c", UpdatedAt: "u"}
	if err := s.d.Store.PutPool(ctx, own, true); err != nil {
		t.Fatal(err)
	}
	acme := principal.Caller{Tenant: "acme"}
	adminForAcme := principal.Caller{Tenant: "acme", Admin: true}
	beta := principal.Caller{Tenant: "beta"}

	v, err := s.m.Get(ctx, acme, "own")
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "own" || string(v.Template) != string(own.Template) || v.CapacitySpec.PoolMax != 2 || v.CreatedAt != "c" || v.UpdatedAt != "u" || v.Status.Total != 0 {
		t.Errorf("view = %+v, want the stored pool with no members", v)
	}
	if _, err := s.m.Get(ctx, beta, "own"); !isPoolNotFound(err) {
		t.Errorf("another tenant's Get: %v, want %s", err, CodeNotFound)
	}
	if _, err := s.m.Get(ctx, acme, shared.Name); !isPoolNotFound(err) {
		t.Errorf("a tenant's Get of the default tenant's pool: %v, want %s", err, CodeNotFound)
	}
	if p, err := s.m.Lookup(ctx, adminForAcme, shared.Name); err != nil || p.Tenant != principal.DefaultTenant {
		t.Errorf("the admin's Lookup of the default tenant's pool: %+v, %v", p, err)
	}
	if list, err := s.m.List(ctx, acme); err != nil || len(list) != 1 || list[0].Name != "own" {
		t.Errorf("List = %+v, %v; want acme's one pool", list, err)
	}
	if list, err := s.m.List(ctx, beta); err != nil || list == nil || len(list) != 0 {
		t.Errorf("List of a tenant without pools = %#v, %v; want an empty list", list, err)
	}

	if err := s.m.Delete(ctx, beta, "own"); !isPoolNotFound(err) {
		t.Errorf("another tenant's Delete: %v, want %s", err, CodeNotFound)
	}
	if err := s.m.Delete(ctx, acme, "own"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.m.Get(ctx, acme, "own"); !isPoolNotFound(err) {
		t.Errorf("Get after Delete: %v, want %s", err, CodeNotFound)
	}
}

// isPoolNotFound says whether err is the not-found of a pool.
func isPoolNotFound(err error) bool {
	e, ok := fault.AsError(err)
	return ok && e.Kind == fault.KindNotFound && e.Code == CodeNotFound
}
