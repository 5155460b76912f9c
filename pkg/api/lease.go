package api

import (
	"crypto/sha256"
	"encoding/hex"
)

// A node agent proves it is alive by renewing a coordination.k8s.io/v1 Lease
// per node (LeaseName(node) in LeaseNamespace, labelled LabelLeaseNode=node,
// holderIdentity the node), as the kubelet does with its own node Lease; the
// scheduler skips a node whose Lease is missing or expired. Its GPUNode
// status is written only when it changes.
const (
	// LeaseNamespace is where the agents' Leases live, beside the kubelets'.
	LeaseNamespace = "kube-node-lease"
	// LabelLeaseNode names the node on its Lease (the scheduler watches
	// the Leases that carry it).
	LabelLeaseNode = Group + "/node"
	leasePrefix    = "gpuslice-"
	maxNameLen     = 253
)

// LeaseName is the name of the node's gpuslice Lease: "gpuslice-<node>",
// or, for a node name too long for that, its first characters and a hash
// of the whole name (still one name per node).
func LeaseName(node string) string {
	if len(leasePrefix)+len(node) <= maxNameLen {
		return leasePrefix + node
	}
	sum := sha256.Sum256([]byte(node))
	h := hex.EncodeToString(sum[:8])
	keep := maxNameLen - len(leasePrefix) - 1 - len(h)
	return leasePrefix + node[:keep] + "-" + h
}
