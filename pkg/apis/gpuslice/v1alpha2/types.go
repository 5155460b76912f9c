package v1alpha2

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// GPUNode CRD coordinates.
const (
	Version         = "v1alpha2"
	GPUNodeKind     = "GPUNode"
	GPUNodeResource = "gpunodes"
)

// GPUNodeGVR is the group/version/resource of the GPUNode table.
var GPUNodeGVR = SchemeGroupVersion.WithResource(GPUNodeResource)

// NodeState is the node agent's working state.
type NodeState string

// Node states. Only Working nodes get new pods.
const (
	NodeWorking  NodeState = "Working"
	NodeDraining NodeState = "Draining"
	NodeNotReady NodeState = "NotReady"
)

// GPUHealth is the health the node agent measured for one GPU.
type GPUHealth string

// GPU health values. Only Healthy GPUs get new pods.
const (
	GPUHealthy   GPUHealth = "Healthy"
	GPUUnhealthy GPUHealth = "Unhealthy"
)

// GPUNode is one row of the resource table: the GPUs of one node as its agent
// last measured them. It is cluster scoped and named after the node; the
// agent writes it through the status subresource.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gpun
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.summary.gpus`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.summary.healthyGPUs`
// +kubebuilder:printcolumn:name="Units-Free",type=integer,JSONPath=`.status.summary.unitsFree`
// +kubebuilder:printcolumn:name="Units",type=integer,JSONPath=`.status.summary.unitsTotal`
// +kubebuilder:printcolumn:name="Mem-Free",type=string,JSONPath=`.status.summary.memoryFree`,description="free GPU memory"
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.summary.memory`,description="GPU memory"
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.status.gpus[0].model`
// +kubebuilder:printcolumn:name="Sharing",type=string,JSONPath=`.status.gpus[0].sharingMode`,description="sharing mode of GPU 0 (timeslice or mps)"
// +kubebuilder:printcolumn:name="Updated",type=date,JSONPath=`.status.updateTime`,description="when the status last changed"
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1,description="why the node is not Working or which GPUs are unhealthy"
type GPUNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Status GPUNodeStatus `json:"status,omitempty"`
}

// GPUNodeStatus is what the node agent measured.
//
// +kubebuilder:object:generate=true
type GPUNodeStatus struct {
	// +kubebuilder:validation:Enum=Working;Draining;NotReady
	State NodeState `json:"state"`
	// UpdateTime is when the agent last wrote this status.
	UpdateTime metav1.Time `json:"updateTime"`
	// PeriodSeconds is the agent's measuring period.
	// +kubebuilder:validation:Minimum=0
	// +optional
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=index
	GPUs []GPU `json:"gpus"`
	// +optional
	Summary Summary `json:"summary"`
}

// GPU is one device of the node.
//
// +kubebuilder:object:generate=true
type GPU struct {
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UUID string `json:"uuid"`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Model string `json:"model"`
	// Memory is the GPU's memory (positive).
	Memory resource.Quantity `json:"memory"`
	// +kubebuilder:validation:Minimum=1
	UnitsTotal int64 `json:"unitsTotal"`
	// UnitsFree and MemoryFree: capacity not assigned to pods on the
	// node, as the node side sees it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	UnitsFree int64 `json:"unitsFree"`
	// +optional
	MemoryFree resource.Quantity `json:"memoryFree"`
	// +kubebuilder:validation:Enum=Healthy;Unhealthy
	Health GPUHealth `json:"health"`
	// HealthMessage says why an Unhealthy GPU is unhealthy (an XID, a
	// failing NVML query, ...).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	HealthMessage string `json:"healthMessage,omitempty"`
	// UtilizationPercent is the measured compute utilization (0-100).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	UtilizationPercent int32 `json:"utilizationPercent"`
	// UnscheduledProcesses counts processes on the GPU that belong to no
	// pod gpuslice scheduled there.
	// +kubebuilder:validation:Minimum=0
	// +optional
	UnscheduledProcesses int32 `json:"unscheduledProcesses,omitempty"`
	// SharingMode is how pods share the GPU ("" = timeslice). In mps mode
	// UnitsTotal is M x N x K and UnitsFree is bounded by the MPS client
	// slots left, measured from the live clients.
	// +kubebuilder:validation:Enum=timeslice;mps
	// +optional
	SharingMode api.SharingMode `json:"sharingMode,omitempty"`
	// MPSClients is the number of live MPS clients (mps mode).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MPSClients int32 `json:"mpsClients,omitempty"`
	// Elastic memory (AnnotationMemoryMax), summed over the groups on the
	// GPU: memory on the device within guarantees, past them (borrowed from
	// the time-slice daemon), and borrowed memory moved to host memory.
	// +optional
	MemoryGuaranteed resource.Quantity `json:"memoryGuaranteed,omitzero"`
	// +optional
	MemoryBorrowed resource.Quantity `json:"memoryBorrowed,omitzero"`
	// +optional
	MemorySpilled resource.Quantity `json:"memorySpilled,omitzero"`
}

// Mode is the GPU's sharing mode (timeslice when the entry names none).
func (g GPU) Mode() api.SharingMode {
	if g.SharingMode == "" {
		return api.SharingTimeslice
	}
	return g.SharingMode
}

// Summary aggregates GPUs for printer columns. Memory and MemoryFree are
// the GPUs' sums rounded down to MiB, so they read in human units ("640Gi",
// "81559Mi"); programs read the GPUs' exact quantities.
//
// +kubebuilder:object:generate=true
type Summary struct {
	// +optional
	GPUs int32 `json:"gpus"`
	// +optional
	HealthyGPUs int32 `json:"healthyGPUs"`
	// +optional
	UnitsTotal int64 `json:"unitsTotal"`
	// +optional
	UnitsFree int64 `json:"unitsFree"`
	// +optional
	Memory resource.Quantity `json:"memory"`
	// +optional
	MemoryFree resource.Quantity `json:"memoryFree"`
}

// Bytes is b bytes as a quantity ("80Gi", "81559Mi", or the plain number of
// bytes when no binary suffix divides it).
func Bytes(b int64) resource.Quantity { return *resource.NewQuantity(b, resource.BinarySI) }

// humanBytes is b rounded down to MiB.
func humanBytes(b int64) resource.Quantity {
	const mi = 1 << 20
	return Bytes(b / mi * mi)
}

// Summarize computes the Summary of gpus.
func Summarize(gpus []GPU) Summary {
	var s Summary
	var mem, free int64
	for _, g := range gpus {
		s.GPUs++
		if g.Health == GPUHealthy {
			s.HealthyGPUs++
		}
		s.UnitsTotal += g.UnitsTotal
		s.UnitsFree += g.UnitsFree
		mem += g.Memory.Value()
		free += g.MemoryFree.Value()
	}
	s.Memory, s.MemoryFree = humanBytes(mem), humanBytes(free)
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
		case g.UnitsTotal <= 0 || g.Memory.Sign() <= 0:
			return bad("gpu %d: unitsTotal and memory must be positive", g.Index)
		case g.MemoryFree.Sign() < 0 || g.MemoryGuaranteed.Sign() < 0 || g.MemoryBorrowed.Sign() < 0 || g.MemorySpilled.Sign() < 0:
			return bad("gpu %d: negative memory", g.Index)
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
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type GPUNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUNode `json:"items"`
}
