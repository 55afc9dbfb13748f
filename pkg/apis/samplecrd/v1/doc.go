// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/samplecrd/network-apiserver/pkg/apis/samplecrd
// +k8s:defaulter-gen=TypeMeta
// +groupName=samplecrd.k8s.io
// +k8s:openapi-model-package=com.github.samplecrd.network-apiserver.pkg.apis.samplecrd.v1

// Package v1 is the stable version of samplecrd.k8s.io and the version Networks are stored in.
package v1
