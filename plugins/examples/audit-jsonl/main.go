//go:build wasip1

// Command audit-jsonl is an audit plugin: for each event of its tenant it
// emits one compact JSON record (one JSONL line once the sink writes it)
// through the host's emit_audit.
//
// Settings:
//
//	{"types": ["preview.accessed", "policy.denied"], "omitData": false}
//
// types keeps only the listed event types (all when empty); omitData drops
// the event's data object from the record.
package main

import (
	"encoding/json"
	"fmt"

	"github.com/sandgate/sandgate/plugins/guest"
)

type settings struct {
	Types    []string `json:"types"`
	OmitData bool     `json:"omitData"`
}

var (
	conf  settings
	types map[string]bool
)

func init() {
	guest.OnConfigure(func(raw []byte) error {
		if err := json.Unmarshal(raw, &conf); err != nil {
			return fmt.Errorf("settings: %w", err)
		}
		if len(conf.Types) > 0 {
			types = make(map[string]bool, len(conf.Types))
			for _, t := range conf.Types {
				types[t] = true
			}
		}
		return nil
	})
}

type event struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Tenant    string          `json:"tenant"`
	SandboxID string          `json:"sandboxId"`
	Time      string          `json:"time"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// record is the audit line: short keys, fixed order, nothing empty.
type record struct {
	Time    string          `json:"t"`
	Tenant  string          `json:"tenant"`
	Event   string          `json:"ev"`
	Sandbox string          `json:"sb,omitempty"`
	ID      string          `json:"id"`
	Data    json.RawMessage `json:"data,omitempty"`
}

//go:wasmexport on_event
func onEvent(ptr, n uint32) {
	var ev event
	if err := json.Unmarshal(guest.Input(ptr, n), &ev); err != nil {
		guest.Log(guest.LevelWarn, "audit-jsonl: unreadable event: "+err.Error())
		return
	}
	if types != nil && !types[ev.Type] {
		return
	}
	rec := record{Time: ev.Time, Tenant: ev.Tenant, Event: ev.Type, Sandbox: ev.SandboxID, ID: ev.ID}
	if !conf.OmitData && len(ev.Data) > 0 && string(ev.Data) != "null" && string(ev.Data) != "{}" {
		rec.Data = ev.Data
	}
	out, err := json.Marshal(rec)
	if err != nil {
		guest.Log(guest.LevelError, "audit-jsonl: "+err.Error())
		return
	}
	guest.EmitAudit(out)
}

func main() {}
