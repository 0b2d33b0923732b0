package modules

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/gateway/metrics"
	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/tracing"
)

// metricsServing is the running state of the metrics listener; App embeds it (the settings are
// App's MetricsListen, MetricsTenantLabel and SandboxMetricsInterval).
type metricsServing struct {
	metricsHandler http.Handler
	metricsServer  *http.Server
	metricsCtx     caddy.Context
}

// tracingOnce starts the process's trace exporter with the first config (the
// OTEL_EXPORTER_OTLP_* variables are the process's, not a config's).
var tracingOnce sync.Once

// usageInterval parses SandboxMetricsInterval: zero is the default, negative is off.
func (m *App) usageInterval() (time.Duration, error) {
	switch m.SandboxMetricsInterval {
	case "":
		return 0, nil
	case "off":
		return -1, nil
	}
	d, err := caddy.ParseDuration(m.SandboxMetricsInterval)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("sandbox_metrics_interval %q: want a duration of 1s or more, or off", m.SandboxMetricsInterval)
	}
	return d, nil
}

// provisionMetrics registers the gateway's series into this config's Caddy metrics
// registry (the one Caddy's own http metrics and its `metrics` handler use), so that
// one scrape returns both, and builds the handler that serves it.
func (a *App) provisionMetrics(ctx caddy.Context) error {
	if l := a.MetricsTenantLabel; l != "" && l != "on" && l != "off" {
		return fmt.Errorf("metrics_tenant_label %q: want on or off", l)
	}
	if a.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(a.MetricsListen); err != nil {
			return fmt.Errorf("metrics_listen %q: want host:port", a.MetricsListen)
		}
	}
	a.metricsCtx = ctx
	tracingOnce.Do(func() {
		if _, err := tracing.Setup(context.Background(), "sandgate", gateway.Version); err != nil {
			ctx.Slogger().Error("tracing is off: the OTLP exporter did not start", "err", err)
		}
	})
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return errors.New("no Caddy metrics registry")
	}
	collectors := a.core.service.Usage().Collectors(a.MetricsTenantLabel != "off")
	if rc, ok := a.core.service.Runtime().(runtimes.EnforcerRestartCounter); ok {
		collectors = append(collectors, metrics.NewEnforcerRestarts(rc.EnforcerProcessRestarts))
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return fmt.Errorf("register metrics: %w", err)
			}
		}
	}
	a.metricsHandler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
	return nil
}

// startMetrics opens the metrics listener, when one is configured.
func (a *App) startMetrics() error {
	if a.MetricsListen == "" {
		return nil
	}
	// Caddy's listener pool lets the next config's listener take the address over
	// on a reload, as its HTTP servers' do.
	addr, err := caddy.ParseNetworkAddress(a.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics_listen: %w", err)
	}
	l, err := addr.Listen(a.metricsCtx, 0, net.ListenConfig{})
	if err != nil {
		return fmt.Errorf("metrics_listen: %w", err)
	}
	ln, ok := l.(net.Listener)
	if !ok {
		return fmt.Errorf("metrics_listen %s: not a stream listener", a.MetricsListen)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metricsHandler)
	a.metricsServer = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = a.metricsServer.Serve(ln) }()
	return nil
}

// stopMetrics closes the metrics listener.
func (a *App) stopMetrics() error {
	if a.metricsServer == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.metricsServer.Shutdown(ctx)
}
