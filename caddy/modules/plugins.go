package modules

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/plugins"
)

// pluginCloseTimeout bounds how long shutdown waits for queued plugin events.
const pluginCloseTimeout = 5 * time.Second

// startPlugins builds the WASM plugin host and attaches it to svc, which then feeds it
// every tenant's events, asks it about TTLs, stores its audit records and keeps it in
// line with the plugins stored in Redis. Call it before svc.Start.
func (a *App) startPlugins(ctx context.Context, svc *gateway.Service, log *slog.Logger) (*plugins.Host, error) {
	host, err := plugins.NewHost(ctx, plugins.HostOptions{
		CacheDir:        a.PluginCacheDir,
		DefaultDeadline: time.Duration(a.PluginTimeout),
		// Give idle instances' memory back; restarting one costs milliseconds.
		IdleTimeout: 10 * time.Minute,
		Logger:      log.With("component", "plugins"),
		Audit:       svc.Events().RecordAudit,
	})
	if err != nil {
		return nil, fmt.Errorf("start plugin host: %w", err)
	}
	svc.AttachPlugins(ctx, host)
	return host, nil
}

// closePlugins delivers what is queued (within pluginCloseTimeout) and releases the
// host; the service must be stopped first so that nothing feeds it any more.
func (c *core) closePlugins() {
	if c.plugins == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pluginCloseTimeout)
	defer cancel()
	_ = c.plugins.Close(ctx)
}
