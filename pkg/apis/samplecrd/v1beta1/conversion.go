package v1beta1

import (
	"k8s.io/apimachinery/pkg/conversion"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// Convert_v1beta1_NetworkSpec_To_samplecrd_NetworkSpec maps the v1beta1 names onto the super version.
func Convert_v1beta1_NetworkSpec_To_samplecrd_NetworkSpec(in *NetworkSpec, out *samplecrd.NetworkSpec, s conversion.Scope) error {
	out.CIDR = in.Subnet
	out.Gateway = in.GatewayIP
	out.PrefixLength = in.PrefixLength
	return nil
}

// Convert_samplecrd_NetworkSpec_To_v1beta1_NetworkSpec maps the super version onto the v1beta1 names.
func Convert_samplecrd_NetworkSpec_To_v1beta1_NetworkSpec(in *samplecrd.NetworkSpec, out *NetworkSpec, s conversion.Scope) error {
	out.Subnet = in.CIDR
	out.GatewayIP = in.Gateway
	out.PrefixLength = in.PrefixLength
	return nil
}
