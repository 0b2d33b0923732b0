package docker

// The log of an enforcer process (<dir>/<id>/enforcer.log) is opened by the runtime for
// it, in append mode, as its stdout and stderr, and the process cannot write a file past
// enforcerLogBytes. So that a long-lived enforcer (each vault injection is a line) keeps
// its latest lines rather than falling silent, the helper sweep keeps its log as two
// files, as the engine keeps a sidecar's (containerlogs.go): once the log holds
// enforcerLogRotateBytes, its content is copied to enforcer.log.1 and it is emptied in
// place, under the directory's lock; the process's next line, appended, starts it again.
// A line written between the copy and the emptying is lost.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// enforcerLogFile is an enforcer process's log in its directory.
const enforcerLogFile = "enforcer.log"

// enforcerLogRotateBytes is the size at which the sweep rotates an enforcer's log.
const enforcerLogRotateBytes = enforcerLogBytes / 2

// rotateEnforcerLog rotates dir's enforcer log if it holds rotateAt bytes or more, and
// reports whether it did.
func rotateEnforcerLog(dir string, rotateAt int64) (bool, error) {
	path := filepath.Join(dir, enforcerLogFile)
	log, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("enforcer log: %w", err)
	}
	defer log.Close()
	info, err := log.Stat()
	if err != nil {
		return false, fmt.Errorf("enforcer log: %w", err)
	}
	if info.Size() < rotateAt {
		return false, nil
	}
	tmp := path + ".1.tmp"
	kept, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return false, fmt.Errorf("enforcer log: %w", err)
	}
	_, err = io.Copy(kept, log)
	if cerr := kept.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path+".1")
	}
	if err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("enforcer log: keep the last: %w", err)
	}
	if err := log.Truncate(0); err != nil {
		return false, fmt.Errorf("enforcer log: empty it: %w", err)
	}
	return true, nil
}
