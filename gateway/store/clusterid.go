// The cluster id: the identity of a store, which every sandbox its gateways start carries.

package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ClusterID returns the identity of this store: a random id made once and kept, carried
// by every sandbox the gateways of this store start (runtimes.LabelCluster), so that a
// gateway adopts and removes only its own store's sandboxes. With Redis the id is a key;
// the embedded store is lost when its gateway stops, so its id is kept in its directory
// instead (embeddeddir.go), which lets a restarted gateway recognise its own sandboxes.
func (s *Store) ClusterID(ctx context.Context) (string, error) {
	if s.embedded != nil && s.dir != nil {
		id, err := clusterFromFile(s.dir.clusterFile())
		if err == nil {
			return id, nil
		}
		s.log.Warn("cannot keep the embedded store's cluster id in its directory; a restart will not recognise this run's sandboxes", "dir", s.dir.path, "err", err)
		s.dir.release()
		s.dir = nil
	}
	key := s.Key("cluster")
	if err := s.rdb.SetNX(ctx, key, randomID(), 0).Err(); err != nil {
		return "", wrap(err)
	}
	id, err := s.rdb.Get(ctx, key).Result()
	return id, wrap(err)
}

// clusterFromFile reads the id kept in path, making it first if there is none. The
// first writer wins (a hard link), so that stores sharing a directory where it cannot
// be locked agree.
func clusterFromFile(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	tmp := fmt.Sprintf("%s.%s", path, randomID())
	if err := os.WriteFile(tmp, []byte(randomID()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("cluster id: %w", err)
	}
	defer os.Remove(tmp)
	// A hard link fails if path exists: the first gateway's id stands.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("cluster id: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cluster id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
