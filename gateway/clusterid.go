// The cluster id: the configured one or else the identity of the store this gateway
// runs on (recovery.Manager.ClusterID), carried by every sandbox it starts
// (runtimes.LabelCluster), so that gateways adopt and remove only their own store's
// sandboxes. Here: which sandboxes are this store's, and the configured id's check.

package gateway

import (
	"fmt"
	"regexp"

	"github.com/sandgate/sandgate/runtimes"
)

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
