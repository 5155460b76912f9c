package config

import (
	"k8s.io/apimachinery/pkg/runtime"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// SchemeGroupVersion is kube-scheduler's internal configuration version, the
// one plugins receive their arguments in.
var SchemeGroupVersion = schedconfig.SchemeGroupVersion

// AddToScheme registers the internal GPUSliceArgs in s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &GPUSliceArgs{})
	return nil
}
