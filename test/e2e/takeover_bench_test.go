package e2e

import (
	"testing"
	"time"
)

// BenchmarkGatewayTakeover: two gateways on one Redis; one is killed (SIGKILL) while it
// has creates in flight. The figure is the time from the kill until the survivor lists
// none of the dead gateway's sandboxes as Pending and every container left on the
// network is a complete sandbox (finished or removed by the takeover), p50 and max.
// The baseline is the liveness lease itself (HeartbeatTTL in gateway/recovery/recovery.go, 3 s):
// no takeover can start before the dead owner's lease runs out.
func BenchmarkGatewayTakeover(b *testing.B) {
	var all []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newEnv(b, startRedis(b))
		survivor := e.startGateway()
		victim := e.startGateway()
		done := fireCreates(victim, 6, nil)
		// Kill once the victim holds Pending records: work in flight to take over.
		waitFor(b, 3*time.Minute, func() bool {
			for _, st := range survivor.listed() {
				if st == "Pending" {
					return true
				}
			}
			return false
		}, "the victim's creates to be Pending")
		b.StartTimer()
		killed := time.Now()
		victim.proc.Kill()
		<-done
		waitFor(b, 3*time.Minute, func() bool {
			listed := survivor.listed()
			for _, st := range listed {
				if st == "Pending" {
					return false
				}
			}
			for id, f := range e.facts() {
				if listed[id] != "Running" || !f.complete() {
					return false
				}
			}
			return true
		}, "the survivor to take the dead gateway's work over")
		all = append(all, time.Since(killed))
		b.StopTimer()
		e.removeDockerObjects()
	}
	reportDelays(b, all)
	b.ReportMetric(3000, "baseline-lease-ms")
}
