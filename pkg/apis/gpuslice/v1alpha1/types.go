package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// GPUNode CRD coordinates.
const (
	Version         = "v1alpha1"
	GPUNodeKind     = "GPUNode"
	GPUNodeResource = "gpunodes"
)

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
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gpun
// +kubebuilder:subresource:status
// +kubebuilder:unservedversion
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.summary.gpus`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.summary.healthyGPUs`
// +kubebuilder:printcolumn:name="Units-Free",type=integer,JSONPath=`.status.summary.unitsFree`
// +kubebuilder:printcolumn:name="Units",type=integer,JSONPath=`.status.summary.unitsTotal`
// +kubebuilder:printcolumn:name="Mem-Free",type=string,JSONPath=`.status.summary.memoryFree`,description="free GPU memory"
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.summary.memory`,description="GPU memory"
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.status.gpus[0].model`
// +kubebuilder:printcolumn:name="Sharing",type=string,JSONPath=`.status.gpus[0].sharingMode`,description="sharing mode of GPU 0 (timeslice or mps)"
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.heartbeat`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1,description="why the node is not Working or which GPUs are unhealthy"
type GPUNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Status GPUNodeStatus `json:"status,omitempty"`
}

// GPUNodeStatus is what the node agent publishes each monitoring period.
//
// +kubebuilder:object:generate=true
type GPUNodeStatus struct {
	// +kubebuilder:validation:Enum=Working;Draining;NotReady
	State NodeState `json:"state"`
	// Heartbeat is when the agent last published; the scheduler skips
	// nodes whose heartbeat is older than its heartbeatTimeout.
	Heartbeat metav1.Time `json:"heartbeat"`
	// PeriodSeconds is the agent's publishing period.
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
	// +kubebuilder:validation:Minimum=1
	MemoryBytes int64 `json:"memoryBytes"`
	// +kubebuilder:validation:Minimum=1
	UnitsTotal int64 `json:"unitsTotal"`
	// UnitsFree and MemoryFreeBytes: capacity not assigned to pods on the
	// node, as the node side sees it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	UnitsFree int64 `json:"unitsFree"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	MemoryFreeBytes int64 `json:"memoryFreeBytes"`
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
	// GPU: bytes on the device within guarantees, past them (borrowed from
	// the time-slice daemon), and borrowed bytes moved to host memory.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MemoryGuaranteedBytes int64 `json:"memoryGuaranteedBytes,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	MemoryBorrowedBytes int64 `json:"memoryBorrowedBytes,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	MemorySpilledBytes int64 `json:"memorySpilledBytes,omitempty"`
}

// Summary aggregates GPUs for printer columns. Memory and MemoryFree are
// MemoryBytes and MemoryFreeBytes as quantities rounded down to MiB, for
// people (kubectl get gpunodes); programs read the byte counts.
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
	MemoryBytes int64 `json:"memoryBytes"`
	// +optional
	MemoryFreeBytes int64 `json:"memoryFreeBytes"`
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// +optional
	MemoryFree *resource.Quantity `json:"memoryFree,omitempty"`
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
