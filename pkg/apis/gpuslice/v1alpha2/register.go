package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: api.Group, Version: Version}

// Resource is the group-qualified resource of a resource name of this
// version (the generated listers use it in their NotFound errors).
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

// AddToScheme registers this version's types in a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &GPUNode{}, &GPUNodeList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
