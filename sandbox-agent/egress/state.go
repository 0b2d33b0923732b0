package egress

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// stateFile keeps the policy in force on the enforcer's own filesystem (the sidecar's,
// which the workload cannot read or write: it is another container with its own mount
// and PID namespaces), so that a restarted enforcer installs the policy last set
// through the API and not the one it was created with. A nil *stateFile keeps nothing.
//
// It keeps the credential vault too (values included: the file is the sidecar's, mode
// 0600, and the workload cannot reach it), so that a restarted enforcer still injects.
type stateFile struct {
	path string

	mu     sync.Mutex  // orders writes and guards the two halves below
	policy *Policy     // last saved policy (nil: none yet)
	vault  *vaultState // last saved vault (nil: none)
}

// savedState is the file's content.
type savedState struct {
	Policy Policy      `json:"policy"`
	Vault  *vaultState `json:"vault,omitempty"`
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
	v, err := st.Vault.restored()
	if err != nil {
		return Policy{}, false, fmt.Errorf("state file %s: vault: %w", s.path, err)
	}
	s.mu.Lock()
	s.policy, s.vault = &p, v
	s.mu.Unlock()
	return p, true, nil
}

// savedVault returns the vault load found (nil: none).
func (s *stateFile) savedVault() *vaultState {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vault
}

// saveVault replaces the saved vault (nil deletes it), keeping the saved policy.
func (s *stateFile) saveVault(v *vaultState) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.policy == nil {
		return errors.New("write state file: no policy saved yet")
	}
	if err := s.write(savedState{Policy: *s.policy, Vault: v}); err != nil {
		return err
	}
	s.vault = v
	return nil
}

// save replaces the saved policy atomically (write to a temporary file, fsync, rename).
func (s *stateFile) save(p Policy) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.write(savedState{Policy: p, Vault: s.vault}); err != nil {
		return err
	}
	s.policy = &p
	return nil
}

func (s *stateFile) write(st savedState) error {
	data, err := json.Marshal(st)
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
