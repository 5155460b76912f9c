// Package v1alpha1 is the first version of the gpuslice.io API group, memory
// in integer bytes. It is no longer served: v1alpha2 (memory as quantities)
// replaced it. It stays in the CRD (unserved, not stored) only so that a
// cluster whose etcd holds GPUNodes written as v1alpha1 can take the new CRD
// (a CRD must keep every version it has stored). Such objects are read back
// as v1alpha2 without conversion: their memory fields are missing, so they
// fail validation (the scheduler skips the node) until the node's agent
// rewrites its status, at its first measurement after the upgrade.
//
// The CRD's v1alpha1 schema (deploy/crds) and the deep copies are generated
// from the markers here: make generate.
//
// +k8s:deepcopy-gen=package
// +groupName=gpuslice.io
// +kubebuilder:object:generate=true
package v1alpha1
