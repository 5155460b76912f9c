// Package v1 holds the versioned GPUSlice scheduler plugin arguments,
// kubescheduler.config.k8s.io/v1 GPUSliceArgs, as written in a
// KubeSchedulerConfiguration's pluginConfig: registered in kube-scheduler's
// schemes with their defaults and conversion to the internal type (package
// config), so its configuration loader decodes them strictly.
//
// +kubebuilder:object:generate=true
package v1
