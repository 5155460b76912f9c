package v1alpha1

import "k8s.io/apimachinery/pkg/runtime"

// AddToScheme registers this version's types in a scheme (for clients that
// build configurations, e.g. tests creating ResourceClaims).
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &GPUShareConfig{})
	return nil
}
