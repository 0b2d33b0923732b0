//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockExclusive takes f's lock without waiting; the lock lasts while f is open, and the
// kernel drops it when the process dies however it dies.
func lockExclusive(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("embedded store directory %s: %w", filepath.Dir(f.Name()), errDirInUse)
	}
	if err != nil {
		return fmt.Errorf("embedded store directory %s: lock: %w", filepath.Dir(f.Name()), err)
	}
	return nil
}
