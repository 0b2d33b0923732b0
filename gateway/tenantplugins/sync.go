package tenantplugins

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/plugins"
)

// syncInterval is how often a replica compares the store's revision with the one it
// last applied, to catch changes announced while its subscription was down.
const syncInterval = 5 * time.Second

// runSync applies every announced change at once and, every syncInterval, syncs the
// whole store when its revision moved without an announcement reaching us.
func (m *Manager) runSync(ctx context.Context) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var applied atomic.Int64
	if rev, err := m.store.Revision(ctx); err == nil {
		applied.Store(rev)
	}
	if !m.group.Go(func() {
		<-m.group.Done()
		cancel()
	}) {
		cancel()
		return
	}
	m.group.Go(func() {
		for ctx.Err() == nil {
			err := m.store.Watch(ctx, func(c plugins.Change) {
				actx, acancel := context.WithTimeout(ctx, 30*time.Second)
				defer acancel()
				m.recordLoad(c.Tenant, c.Name, m.store.Apply(actx, m.host, c.Tenant, c.Name))
				if !c.Deleted {
					m.mu.Lock()
					m.tenants[c.Tenant] = true
					m.mu.Unlock()
				}
			})
			if ctx.Err() != nil {
				return
			}
			m.log.Debug("plugin change subscription ended; resubscribing", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	})
	m.group.Every(m.syncEvery, func(lctx context.Context) {
		rev, err := m.store.Revision(lctx)
		if err != nil || rev == applied.Load() {
			return
		}
		if _, err := m.store.Sync(lctx, m.host); err != nil {
			m.log.Warn("plugin sync: some plugins did not load", "err", err)
		}
		m.noteLoaded(lctx)
		applied.Store(rev)
	})
}

// noteLoaded records which stored plugins failed to load here, and unloads the plugins
// of tenants that no longer have any in the store (Sync only visits stored tenants).
func (m *Manager) noteLoaded(ctx context.Context) {
	tenants, err := m.store.Tenants(ctx)
	if err != nil {
		return
	}
	stored := map[string]bool{}
	for _, tenant := range tenants {
		stored[tenant] = true
		list, err := m.store.List(ctx, tenant)
		if err != nil {
			continue
		}
		for _, sp := range list {
			loaded := false
			for _, info := range m.host.List(tenant) {
				loaded = loaded || (info.Name == sp.Name && info.Version == sp.Version)
			}
			if loaded {
				m.recordLoad(tenant, sp.Name, nil)
			} else {
				m.recordLoad(tenant, sp.Name, m.store.Apply(ctx, m.host, tenant, sp.Name))
			}
		}
	}
	m.mu.Lock()
	var gone []string
	for tenant := range m.tenants {
		if !stored[tenant] {
			gone = append(gone, tenant)
		}
	}
	for tenant := range stored {
		m.tenants[tenant] = true
	}
	m.mu.Unlock()
	for _, tenant := range gone {
		for _, info := range m.host.List(tenant) {
			_ = m.host.Remove(tenant, info.Name)
		}
	}
}

func (m *Manager) recordLoad(tenant, name string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		delete(m.loadErrors, tenant+"/"+name)
		return
	}
	m.loadErrors[tenant+"/"+name] = err.Error()
	m.log.Warn("plugin did not load on this replica", "tenant", tenant, "plugin", name, "err", err)
}
