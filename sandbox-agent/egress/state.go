package egress

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// stateFile keeps the policy in force on the enforcer's own filesystem (the sidecar's,
// which the workload cannot read or write: it is another container with its own mount
// and PID namespaces), so that a restarted enforcer installs the policy last set
// through the API and not the one it was created with. A nil *stateFile keeps nothing.
type stateFile struct {
	path string
}

// savedState is the file's content.
type savedState struct {
	Policy Policy `json:"policy"`
}

// load returns the saved policy; ok is false when there is none yet.
func (s *stateFile) load(maxRules int) (p Policy, ok bool, err error) {
	if s == nil {
		return Policy{}, false, nil
	}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return Policy{}, false, nil
	}
	if err != nil {
		return Policy{}, false, fmt.Errorf("read state file: %w", err)
	}
	var st savedState
	if err := json.Unmarshal(data, &st); err != nil {
		return Policy{}, false, fmt.Errorf("state file %s: %w", s.path, err)
	}
	p, err = NormalizePolicy(st.Policy, maxRules)
	if err != nil {
		return Policy{}, false, fmt.Errorf("state file %s: %w", s.path, err)
	}
	return p, true, nil
}

// save replaces the saved policy atomically (write to a temporary file, fsync, rename).
func (s *stateFile) save(p Policy) error {
	if s == nil {
		return nil
	}
	data, err := json.Marshal(savedState{Policy: p})
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".policy-*")
	if err != nil {
		return fmt.Errorf("write state file: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, s.path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write state file: %w", werr)
	}
	return nil
}
