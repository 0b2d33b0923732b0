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

var record []byte

// onEvent copies the event's fields into the record as raw JSON: the host
// sends valid JSON, so no value needs decoding, and the record is built in
// one reused buffer (see ABI.md on why plugins avoid encoding/json).
//
// The record is {"t","tenant","ev","sb","id","data"} with short keys, in
// that order; sb and data are left out when empty.
//
//go:wasmexport on_event
func onEvent(ptr, n uint32) {
	var at, tenant, typ, sandbox, id, data []byte
	ok := guest.Members(guest.Input(ptr, n), func(key, value []byte) bool {
		switch string(key) {
		case "time":
			at = value
		case "tenant":
			tenant = value
		case "type":
			typ = value
		case "sandboxId":
			sandbox = value
		case "id":
			id = value
		case "data":
			data = value
		}
		return true
	})
	if !ok || typ == nil {
		guest.Log(guest.LevelWarn, "audit-jsonl: unreadable event: not a JSON object with a type")
		return
	}
	if types != nil {
		name, _ := guest.String(typ)
		if !types[name] {
			return
		}
	}
	record = append(record[:0], '{')
	record = field(record, "t", at)
	record = field(record, "tenant", tenant)
	record = field(record, "ev", typ)
	record = field(record, "sb", sandbox)
	record = field(record, "id", id)
	if !conf.OmitData {
		record = field(record, "data", data)
	}
	record = append(record, '}')
	guest.EmitAudit(record)
}

// field appends "name":value unless value is missing or empty.
func field(dst []byte, name string, value []byte) []byte {
	if value == nil || empty(value) {
		return dst
	}
	return append(key(dst, name), value...)
}

// key appends "name": after a comma unless it is the record's first key.
func key(dst []byte, name string) []byte {
	if dst[len(dst)-1] != '{' {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

func empty(v []byte) bool {
	s := string(v)
	return s == `""` || s == "null" || s == "{}" || s == "[]"
}

func main() {}
