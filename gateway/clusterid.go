// The cluster id: the configured one or else the identity of the store this gateway
// runs on, carried by every sandbox it starts (runtimes.LabelCluster), so that gateways
// adopt and remove only their own store's sandboxes.

package gateway

import (
	"context"
	"fmt"
	"regexp"

	"github.com/sandgate/sandgate/runtimes"
)

// clusterID returns this gateway's store identity, fetched once.
func (s *Service) clusterID(ctx context.Context) (string, error) {
	s.crash.mu.Lock()
	defer s.crash.mu.Unlock()
	if s.crash.cluster != "" {
		return s.crash.cluster, nil
	}
	if s.cfg.ClusterID != "" {
		s.crash.cluster = s.cfg.ClusterID
		return s.cfg.ClusterID, nil
	}
	id, err := s.store.ClusterID(ctx)
	if err != nil {
		return "", fmt.Errorf("read the store's cluster id: %w", err)
	}
	s.crash.cluster = id
	return id, nil
}

// labelCluster adds this gateway's cluster label to a spec.
func (s *Service) labelCluster(ctx context.Context, spec *runtimes.Spec) error {
	id, err := s.clusterID(ctx)
	if err != nil {
		return err
	}
	labels := make(map[string]string, len(spec.Labels)+1)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[runtimes.LabelCluster] = id
	spec.Labels = labels
	return nil
}

// ownInstance says whether a sandbox without a record belongs to this gateway's store:
// another store's sandboxes on the same engine are neither adopted nor removed, and
// neither are unlabelled ones. (A sandbox with a record in this store is this store's,
// whatever its labels: its id is a random UUID.)
func ownInstance(inst runtimes.Instance, cluster string) bool {
	return inst.Labels[runtimes.LabelCluster] == cluster
}

// clusterIDPattern is what a label value may hold (Docker and Kubernetes alike).
var clusterIDPattern = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// CheckClusterID refuses a configured cluster id that cannot be a label value.
func CheckClusterID(id string) error {
	if id != "" && !clusterIDPattern.MatchString(id) {
		return fmt.Errorf("cluster_id %q: want a label value (letters, digits, '-', '_', '.'; at most 63; starting and ending with a letter or digit)", id)
	}
	return nil
}
