package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Coordinates of the claim configuration.
const (
	// Group is the API group of the configuration (the driver's name).
	Group = "gpuslice.io"
	// Version is this package's version.
	Version = "v1alpha1"
	// GPUShareConfigKind is the kind of GPUShareConfig.
	GPUShareConfigKind = "GPUShareConfig"
)

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Priorities.
const (
	// PriorityHigh (online): takes the GPU from low-priority groups.
	PriorityHigh = "high"
	// PriorityLow (offline): the default.
	PriorityLow = "low"
)

// GPUShareConfig is how a claim's share of a gpuslice.io GPU is run: the
// claim's consumed capacity (units, memory) is its share of GPU time and its
// memory limit; this adds the rest. Every field is optional (Default).
//
// +kubebuilder:object:root=true
type GPUShareConfig struct {
	metav1.TypeMeta `json:",inline"`

	// Priority is "high" (online: runs before low-priority groups and takes
	// the GPU from them) or "low" (offline). Default: low.
	// +optional
	Priority string `json:"priority,omitempty"`

	// Slice is the length of the claim's time slice per scheduling period,
	// for a whole GPU (a claim without a units request), such as "20ms";
	// between 100us and 10s. A share of a GPU gets its time from its units
	// instead, so a slice is refused there. Default: the priority's slice.
	// +optional
	Slice *metav1.Duration `json:"slice,omitempty"`

	// ShareCeiling is the most of each GPU's time the claim takes, in percent
	// (1-100), even when it is alone on the GPU. Unset: none (idle time is
	// lent to whoever wants it).
	// +optional
	ShareCeiling *int32 `json:"shareCeiling,omitempty"`

	// MemoryCeiling turns on elastic memory: the claim's consumed memory is
	// its guarantee and it may borrow up to this ceiling per GPU while the
	// GPU has memory to spare. At least the claim's memory. Unset: the
	// claim's memory is a plain limit.
	// +optional
	MemoryCeiling *resource.Quantity `json:"memoryCeiling,omitempty"`

	// Spill lets borrowed memory move to host memory when the GPU's owner
	// needs it back (needs MemoryCeiling). Default: false.
	// +optional
	Spill bool `json:"spill,omitempty"`
}

// DeviceStatusKind is the kind of DeviceStatus.
const DeviceStatusKind = "DeviceStatus"

// Health of a device in DeviceStatus.
const (
	HealthHealthy   = "Healthy"
	HealthUnhealthy = "Unhealthy"
)

// DeviceStatus is what the node agent writes for each device of a prepared
// claim, as the data of its entry in the ResourceClaim's status.devices
// (allocatedDeviceStatus): the GPU's UUID, its health, and whether the claim
// holds it for admin access (no group, gate or limit). Readers accept this
// version; fields are only added.
//
// +k8s:deepcopy-gen=false
// +kubebuilder:object:generate=false
type DeviceStatus struct {
	metav1.TypeMeta `json:",inline"`

	// UUID is the GPU's UUID, as NVML reports it.
	UUID string `json:"uuid"`
	// Health is Healthy, or Unhealthy while the device carries a
	// gpuslice.io/unhealthy taint.
	Health string `json:"health"`
	// AdminAccess: the claim holds the device for admin access.
	// +optional
	AdminAccess bool `json:"adminAccess,omitempty"`
	// Group is the claim's group on the node ("" for admin access).
	// +optional
	Group string `json:"group,omitempty"`
}
