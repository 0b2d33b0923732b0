package gateway

// Admission itself is a feature (package gateway/admission); here: what a record counts
// for in its tenant's usage, and a create described for the admission policy.

import (
	"github.com/sandgate/sandgate/gateway/admission"
	"github.com/sandgate/sandgate/gateway/state"
	"github.com/sandgate/sandgate/gateway/store"
	"github.com/sandgate/sandgate/runtimes"
)

// measureRecord is what a record counts for in its tenant's usage (store.Meter).
func measureRecord(sb *store.Sandbox) (cpuMillis, memoryBytes int64) {
	if c, err := ParseCPU(sb.ResourceLimits["cpu"]); err == nil {
		cpuMillis = c
	}
	if m, err := ParseMemory(sb.ResourceLimits["memory"]); err == nil {
		memoryBytes = m
	}
	return cpuMillis, memoryBytes
}

// admissionFor describes a create of count sandboxes of spec for the admission policy.
func admissionFor(spec runtimes.Spec, req CreateRequest, count int) admission.Request {
	return admission.Request{Image: spec.Image, CPUMillis: spec.CPUMillis, MemoryBytes: spec.MemoryBytes, Timeout: req.Timeout, Count: count, Runtime: req.Extensions["runtime"], Volumes: state.AdmissionVolumes(spec.Volumes)}
}
