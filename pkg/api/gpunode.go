package api

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GPUNode CRD coordinates.
const (
	GPUNodeVersion  = "v1alpha1"
	GPUNodeKind     = "GPUNode"
	GPUNodeResource = "gpunodes"
)

// GPUNodeGVR is the group/version/resource of the GPUNode table.
var GPUNodeGVR = schema.GroupVersionResource{Group: Group, Version: GPUNodeVersion, Resource: GPUNodeResource}

// NodeState is the node agent's working state.
type NodeState string

// Node states. Only Working nodes get new pods.
const (
	NodeWorking  NodeState = "Working"
	NodeDraining NodeState = "Draining"
	NodeNotReady NodeState = "NotReady"
)

// AnnotationDrain on a GPUNode: "true" makes its node agent publish the node
// Draining (no new pods; pods already there keep running), as cordoning the
// Node does.
const AnnotationDrain = Group + "/drain"

// GPUHealth is the health the node agent measured for one GPU.
type GPUHealth string

// GPU health values. Only Healthy GPUs get new pods.
const (
	GPUHealthy   GPUHealth = "Healthy"
	GPUUnhealthy GPUHealth = "Unhealthy"
)

// GPUNode is one row of the resource table: the GPUs of one node as its agent
// last measured them. It is cluster scoped and named after the node.
type GPUNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            GPUNodeStatus `json:"status,omitempty"`
}

// GPUNodeStatus is what the node agent publishes each monitoring period.
type GPUNodeStatus struct {
	State NodeState `json:"state"`
	// Heartbeat is when the agent last published; the scheduler skips
	// nodes whose heartbeat is older than its heartbeatTimeout.
	Heartbeat metav1.Time `json:"heartbeat"`
	// PeriodSeconds is the agent's publishing period.
	PeriodSeconds int32   `json:"periodSeconds,omitempty"`
	Message       string  `json:"message,omitempty"`
	GPUs          []GPU   `json:"gpus"`
	Summary       Summary `json:"summary"`
}

// GPU is one device of the node.
type GPU struct {
	Index       int32  `json:"index"`
	UUID        string `json:"uuid"`
	Model       string `json:"model"`
	MemoryBytes int64  `json:"memoryBytes"`
	UnitsTotal  int64  `json:"unitsTotal"`
	// UnitsFree and MemoryFreeBytes: capacity not assigned to pods on the
	// node, as the node side sees it.
	UnitsFree       int64     `json:"unitsFree"`
	MemoryFreeBytes int64     `json:"memoryFreeBytes"`
	Health          GPUHealth `json:"health"`
	// HealthMessage says why an Unhealthy GPU is unhealthy (an XID, a
	// failing NVML query, ...).
	HealthMessage string `json:"healthMessage,omitempty"`
	// UtilizationPercent is the measured compute utilization (0-100).
	UtilizationPercent int32 `json:"utilizationPercent"`
	// UnscheduledProcesses counts processes on the GPU that belong to no
	// pod gpuslice scheduled there.
	UnscheduledProcesses int32 `json:"unscheduledProcesses,omitempty"`
	// SharingMode is how pods share the GPU ("" = timeslice). In mps mode
	// UnitsTotal is M x N x K and UnitsFree is bounded by the MPS client
	// slots left, measured from the live clients.
	SharingMode SharingMode `json:"sharingMode,omitempty"`
	// MPSClients is the number of live MPS clients (mps mode).
	MPSClients int32 `json:"mpsClients,omitempty"`
	// Elastic memory (AnnotationMemoryMax), summed over the groups on the
	// GPU: bytes on the device within guarantees, past them (borrowed from
	// the node daemon), and borrowed bytes moved to host memory.
	MemoryGuaranteedBytes int64 `json:"memoryGuaranteedBytes,omitempty"`
	MemoryBorrowedBytes   int64 `json:"memoryBorrowedBytes,omitempty"`
	MemorySpilledBytes    int64 `json:"memorySpilledBytes,omitempty"`
}

// Summary aggregates GPUs for printer columns.
type Summary struct {
	GPUs            int32 `json:"gpus"`
	HealthyGPUs     int32 `json:"healthyGPUs"`
	UnitsTotal      int64 `json:"unitsTotal"`
	UnitsFree       int64 `json:"unitsFree"`
	MemoryBytes     int64 `json:"memoryBytes"`
	MemoryFreeBytes int64 `json:"memoryFreeBytes"`
}

// Summarize computes the Summary of gpus.
func Summarize(gpus []GPU) Summary {
	var s Summary
	for _, g := range gpus {
		s.GPUs++
		if g.Health == GPUHealthy {
			s.HealthyGPUs++
		}
		s.UnitsTotal += g.UnitsTotal
		s.UnitsFree += g.UnitsFree
		s.MemoryBytes += g.MemoryBytes
		s.MemoryFreeBytes += g.MemoryFreeBytes
	}
	return s
}

// ErrInvalidGPUNode wraps every validation failure of a GPUNode.
var ErrInvalidGPUNode = errors.New("invalid GPUNode")

// Validate checks a table row for consistency.
func (n *GPUNode) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: "+format, append([]any{ErrInvalidGPUNode, n.Name}, args...)...)
	}
	switch n.Status.State {
	case NodeWorking, NodeDraining, NodeNotReady:
	default:
		return bad("state %q", n.Status.State)
	}
	seen := map[int32]bool{}
	uuids := map[string]bool{}
	for _, g := range n.Status.GPUs {
		switch {
		case g.Index < 0 || seen[g.Index]:
			return bad("gpu index %d negative or duplicate", g.Index)
		case g.UUID == "" || uuids[g.UUID]:
			return bad("gpu %d: uuid %q empty or duplicate", g.Index, g.UUID)
		case g.UnitsTotal <= 0 || g.MemoryBytes <= 0:
			return bad("gpu %d: unitsTotal and memoryBytes must be positive", g.Index)
		case g.Health != GPUHealthy && g.Health != GPUUnhealthy:
			return bad("gpu %d: health %q", g.Index, g.Health)
		case g.UtilizationPercent < 0 || g.UtilizationPercent > 100:
			return bad("gpu %d: utilizationPercent %d", g.Index, g.UtilizationPercent)
		case g.SharingMode != "" && !g.SharingMode.Valid():
			return bad("gpu %d: sharingMode %q", g.Index, g.SharingMode)
		case g.MPSClients < 0:
			return bad("gpu %d: mpsClients %d", g.Index, g.MPSClients)
		}
		seen[g.Index], uuids[g.UUID] = true, true
	}
	return nil
}

// GPUNodeList is a list of GPUNodes.
type GPUNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUNode `json:"items"`
}

// DeepCopy returns a deep copy of n.
func (n *GPUNode) DeepCopy() *GPUNode {
	if n == nil {
		return nil
	}
	out := &GPUNode{TypeMeta: n.TypeMeta, Status: n.Status}
	n.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	n.Status.Heartbeat.DeepCopyInto(&out.Status.Heartbeat)
	out.Status.GPUs = append([]GPU(nil), n.Status.GPUs...)
	return out
}

// DeepCopyObject implements runtime.Object.
func (n *GPUNode) DeepCopyObject() runtime.Object { return n.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *GPUNodeList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &GPUNodeList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopy())
	}
	return out
}
