package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The embedded store keeps its records in memory, but its cluster id must outlive the
// process: it is how a restarted gateway recognises the sandboxes it made. The id lives
// in the store's directory (file clusterIDFile), and the directory belongs to one
// running gateway at a time (a lock on lockFile, held until Close), so that two
// gateways never share an id: each would adopt, and remove, the other's sandboxes.
//
// A directory named by Options.Dir that another gateway holds is refused. With none,
// the store takes the first free slot of DefaultDir(prefix) (`0`, `1`, …): a gateway
// run alone always gets slot 0 and its id back; a second one run beside it gets slot 1
// and an id of its own. A slot goes with its id to whichever gateway takes it next, so
// gateways that must keep their sandboxes apart across restarts in any order name a
// directory each (or run on Redis).
const (
	clusterIDFile = "cluster-id"
	lockFile      = "lock"
	// defaultSlots bounds the embedded stores of one prefix running at once for a user
	// under DefaultDir; past it the id lasts only the process.
	defaultSlots = 64
)

// errDirInUse reports a store directory locked by another running gateway.
var errDirInUse = errors.New("in use by another running gateway")

// embeddedDir is the directory an embedded store holds.
type embeddedDir struct {
	path string
	lock *os.File
}

func (d *embeddedDir) clusterFile() string { return filepath.Join(d.path, clusterIDFile) }

func (d *embeddedDir) release() {
	if d != nil && d.lock != nil {
		_ = d.lock.Close() // closing the descriptor drops its lock
	}
}

// claimDir locks dir for this store.
func claimDir(dir string) (*embeddedDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded store directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded store directory: %w", err)
	}
	if err := lockExclusive(f); err != nil {
		f.Close()
		return nil, err
	}
	return &embeddedDir{path: dir, lock: f}, nil
}

// claimDefaultDir locks the first free slot under DefaultDir(prefix). Slot 0 takes over,
// once, the id of a per-user cluster file (perUserClusterFile) if one is there.
func claimDefaultDir(prefix string) (*embeddedDir, error) {
	base := DefaultDir(prefix)
	for n := range defaultSlots {
		d, err := claimDir(filepath.Join(base, strconv.Itoa(n)))
		if errors.Is(err, errDirInUse) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			if err := adoptPerUserClusterFile(perUserClusterFile(prefix), d.clusterFile()); err != nil {
				d.release()
				return nil, err
			}
		}
		return d, nil
	}
	return nil, fmt.Errorf("embedded store directory: every one of %d slots under %s is %w", defaultSlots, base, errDirInUse)
}

// adoptPerUserClusterFile moves the id of the per-user file into to, unless to has one
// already, and removes the file. That file holds one id for every embedded store of the
// user with one prefix: the store that takes slot 0 first (the one gateway of a user
// that runs alone) inherits its sandboxes; any other gets an id of its own.
func adoptPerUserClusterFile(perUser, to string) error {
	old, err := os.ReadFile(perUser)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster id: %w", err)
	}
	id := strings.TrimSpace(string(old))
	if _, err := os.Stat(to); err == nil || id == "" {
		return os.Remove(perUser)
	}
	if err := writeFileAtomic(to, []byte(id+"\n")); err != nil {
		return err
	}
	return os.Remove(perUser)
}

// writeFileAtomic writes path whole or not at all.
func writeFileAtomic(path string, b []byte) error {
	tmp := fmt.Sprintf("%s.%s", path, randomID())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("cluster id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cluster id: %w", err)
	}
	return nil
}

// configDir is the user's configuration directory for sandgate.
func configDir() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "sandgate")
}

// prefixName is a key prefix as a file name.
func prefixName(prefix string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, prefix)
}

// DefaultDir is where embedded stores keep their directories when Options name none:
// the user's configuration directory, one set of slots per key prefix.
func DefaultDir(prefix string) string {
	return filepath.Join(configDir(), "embedded-"+prefixName(prefix))
}

// perUserClusterFile is where gateways of earlier versions keep one cluster id for every
// embedded store of a user with prefix; slot 0 of DefaultDir takes its id over.
func perUserClusterFile(prefix string) string {
	return filepath.Join(configDir(), "embedded-cluster-"+prefixName(prefix))
}
