package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group served by network-apiserver.
const GroupName = "samplecrd.k8s.io"

// SchemeGroupVersion is samplecrd.k8s.io/v1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

// Resource returns a group-qualified resource.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder collects the functions that register v1 with a scheme.
	SchemeBuilder      runtime.SchemeBuilder
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme registers v1's types, conversions, defaulters and field labels.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// The generated conversion and defaulter registrations add themselves in their own init.
	localSchemeBuilder.Register(addKnownTypes, addFieldLabelConversions)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &Network{}, &NetworkList{}, &BlockAllocation{}, &BlockAllocationList{}, &BlockClaim{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
