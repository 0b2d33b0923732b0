package docker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestRotateEnforcerLog: a log below the size is left as it is; one at it is kept whole
// as enforcer.log.1 (replacing the one before) and emptied in place, and the writer that
// holds it open in append mode, as an enforcer process does, goes on from its start.
func TestRotateEnforcerLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, enforcerLogFile)
	if rotated, err := rotateEnforcerLog(dir, 10); rotated || err != nil {
		t.Fatalf("rotate without a log: %v, %v", rotated, err)
	}
	writer, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if err := os.WriteFile(path+".1", []byte("older\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	first := bytes.Repeat([]byte("line of the enforcer\n"), 100)
	if _, err := writer.Write(first[:1000]); err != nil {
		t.Fatal(err)
	}
	if rotated, err := rotateEnforcerLog(dir, int64(len(first))); rotated || err != nil {
		t.Fatalf("rotate below the size: %v, %v", rotated, err)
	}
	if _, err := writer.Write(first[1000:]); err != nil {
		t.Fatal(err)
	}
	if rotated, err := rotateEnforcerLog(dir, int64(len(first))); !rotated || err != nil {
		t.Fatalf("rotate at the size: %v, %v", rotated, err)
	}
	if kept, _ := os.ReadFile(path + ".1"); !bytes.Equal(kept, first) {
		t.Errorf("enforcer.log.1 holds %d bytes, want the %d of the rotated log", len(kept), len(first))
	}
	if _, err := writer.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(path); string(now) != "after\n" {
		t.Errorf("the log after rotation holds %q, want the next line only", now)
	}
	if _, err := os.Stat(path + ".1.tmp"); err == nil {
		t.Error("the rotation left its temporary file")
	}
}
