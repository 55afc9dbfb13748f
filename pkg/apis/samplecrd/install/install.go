// Package install registers the samplecrd.k8s.io group, all its versions and the internal super
// version with a scheme, v1 first as the preferred version.
package install

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1beta1"
)

// Install registers the API group and its versions with scheme.
func Install(scheme *runtime.Scheme) {
	utilruntime.Must(samplecrd.AddToScheme(scheme))
	utilruntime.Must(v1.AddToScheme(scheme))
	utilruntime.Must(v1beta1.AddToScheme(scheme))
	utilruntime.Must(scheme.SetVersionPriority(v1.SchemeGroupVersion, v1beta1.SchemeGroupVersion))
}
