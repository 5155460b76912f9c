// Package v1alpha1 is the opaque claim configuration of the gpuslice.io DRA
// driver: GPUShareConfig, apiVersion gpuslice.io/v1alpha1, carried in a
// ResourceClaim's (or a DeviceClass's) spec.devices.config[].opaque.parameters
// with driver gpuslice.io. The API server does not serve it: the node agent
// decodes it (strictly: Decode) at Prepare, defaults it (Default) and
// validates it (Validate, errors naming the field), see docs/dra.md.
//
// The deep copies (zz_generated.deepcopy.go) are generated from the markers
// here: make generate. No CRD: there is no +groupName marker on purpose.
//
// +k8s:deepcopy-gen=package
// +kubebuilder:object:generate=true
package v1alpha1
