// Package v1alpha2 is version v1alpha2 of the gpuslice.io API group: the
// GPUNode resource table (CRD) the node side publishes and the scheduler
// reads.
//
// The CRD (deploy/crds), the deep copies (zz_generated.deepcopy.go) and the
// typed clientset, listers and informers (pkg/generated) are generated from
// the markers here: make generate.
//
// +k8s:deepcopy-gen=package
// +groupName=gpuslice.io
// +kubebuilder:object:generate=true
package v1alpha2
