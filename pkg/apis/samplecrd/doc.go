// +k8s:deepcopy-gen=package
// +groupName=samplecrd.k8s.io

// Package samplecrd holds the internal "super version" of the samplecrd.k8s.io API: the union of
// the fields of every served version. Requests decode into it; defaulting in the strategy,
// validation and admission all work on it; storage encodes it as v1.
package samplecrd
