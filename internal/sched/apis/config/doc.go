// Package config holds the internal (unversioned) type of the GPUSlice
// scheduler plugin's arguments, as kube-scheduler hands them to the plugin
// after decoding, defaulting and converting the versioned type (package v1),
// and their validation.
//
// +kubebuilder:object:generate=true
package config
