/*
Copyright The network-apiserver Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package validation checks Networks in the internal super version and reports every problem with
// its exact field path, so that clients see a 422 naming the field instead of a generic error.
package validation

import (
	"fmt"
	"net/netip"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// ValidateNetwork validates a Network being created.
func ValidateNetwork(n *samplecrd.Network) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&n.ObjectMeta, true,
		apimachineryvalidation.NameIsDNSLabel, field.NewPath("metadata"))
	return append(allErrs, ValidateNetworkSpec(&n.Spec, field.NewPath("spec"))...)
}

// ValidateNetworkUpdate validates an update of the main resource; spec.cidr is immutable.
func ValidateNetworkUpdate(n, old *samplecrd.Network) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&n.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateNetworkSpec(&n.Spec, field.NewPath("spec"))...)
	if old.Spec.CIDR != "" {
		allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(n.Spec.CIDR, old.Spec.CIDR, field.NewPath("spec", "cidr"))...)
	}
	return allErrs
}

// ValidateNetworkStatusUpdate validates a write to the status subresource.
func ValidateNetworkStatusUpdate(n, old *samplecrd.Network) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&n.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	statusPath := field.NewPath("status")
	if n.Status.ObservedGeneration < 0 {
		allErrs = append(allErrs, field.Invalid(statusPath.Child("observedGeneration"), n.Status.ObservedGeneration, "must not be negative"))
	}
	allErrs = append(allErrs, metav1validation.ValidateConditions(n.Status.Conditions, statusPath.Child("conditions"))...)
	return append(allErrs, validateNodes(n.Status.Nodes, statusPath.Child("nodes"))...)
}

// maxNodeMessageLength bounds a node's message like a condition's.
const maxNodeMessageLength = 32 * 1024

func validateNodes(nodes []samplecrd.NetworkNodeStatus, path *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := make(map[string]bool, len(nodes))
	for i, node := range nodes {
		p := path.Index(i)
		switch {
		case node.NodeName == "":
			allErrs = append(allErrs, field.Required(p.Child("nodeName"), ""))
		case seen[node.NodeName]:
			allErrs = append(allErrs, field.Duplicate(p.Child("nodeName"), node.NodeName))
		default:
			for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(node.NodeName, false) {
				allErrs = append(allErrs, field.Invalid(p.Child("nodeName"), node.NodeName, msg))
			}
		}
		seen[node.NodeName] = true
		if node.ObservedGeneration < 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("observedGeneration"), node.ObservedGeneration, "must not be negative"))
		}
		if node.Attachments < 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("attachments"), node.Attachments, "must not be negative"))
		}
		if len(node.Message) > maxNodeMessageLength {
			allErrs = append(allErrs, field.TooLong(p.Child("message"), "", maxNodeMessageLength))
		}
	}
	return allErrs
}

// ValidateNetworkSpec validates the prefix and the gateway.
func ValidateNetworkSpec(spec *samplecrd.NetworkSpec, path *field.Path) field.ErrorList {
	prefix, allErrs := validateCIDR(spec.CIDR, path.Child("cidr"))
	if spec.Gateway != "" {
		allErrs = append(allErrs, validateGateway(spec.Gateway, prefix, path.Child("gateway"))...)
	}
	if spec.PrefixLength != 0 {
		lengthPath := path.Child("prefixLength")
		switch {
		case spec.PrefixLength < 1 || spec.PrefixLength > samplecrd.MaxIPv6PrefixLength:
			allErrs = append(allErrs, field.Invalid(lengthPath, spec.PrefixLength,
				fmt.Sprintf("must be between 1 and %d (at most %d for IPv4)", samplecrd.MaxIPv6PrefixLength, samplecrd.MaxIPv4PrefixLength)))
		case prefix.IsValid() && int(spec.PrefixLength) != prefix.Bits():
			allErrs = append(allErrs, field.Invalid(lengthPath, spec.PrefixLength,
				fmt.Sprintf("must equal the length of spec.cidr %s", prefix)))
		}
	}
	return allErrs
}

// validateCIDR returns the parsed prefix when it is valid, and the zero prefix otherwise.
func validateCIDR(cidr string, path *field.Path) (netip.Prefix, field.ErrorList) {
	if cidr == "" {
		return netip.Prefix{}, field.ErrorList{field.Required(path, "a prefix such as 10.0.0.0/24 or fd00:1::/64, or spec.prefixLength to have one allocated")}
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Prefix{}, field.ErrorList{field.Invalid(path, cidr, "must be an IPv4 or IPv6 prefix such as 10.0.0.0/24 or fd00:1::/64")}
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, field.ErrorList{field.Invalid(path, cidr, "must not be an IPv4-mapped IPv6 prefix; write the IPv4 prefix itself")}
	}
	if canonical := p.Masked().String(); canonical != cidr {
		return netip.Prefix{}, field.ErrorList{field.Invalid(path, cidr, fmt.Sprintf("must be in canonical form %q (host bits zero, shortest notation)", canonical))}
	}
	if maxBits := samplecrd.MaxPrefixLength(p.Addr()); p.Bits() > maxBits {
		return netip.Prefix{}, field.ErrorList{field.Invalid(path, cidr, fmt.Sprintf("a /%d prefix leaves no address for a gateway; use /%d or shorter", p.Bits(), maxBits))}
	}
	return p, nil
}

// validateGateway checks the gateway alone, and against prefix when prefix is valid.
func validateGateway(gateway string, prefix netip.Prefix, path *field.Path) field.ErrorList {
	gw, err := netip.ParseAddr(gateway)
	if err != nil || gw.Zone() != "" {
		return field.ErrorList{field.Invalid(path, gateway, "must be an IPv4 or IPv6 address")}
	}
	if gw.Is4In6() {
		return field.ErrorList{field.Invalid(path, gateway, "must not be an IPv4-mapped IPv6 address")}
	}
	if canonical := gw.String(); canonical != gateway {
		return field.ErrorList{field.Invalid(path, gateway, fmt.Sprintf("must be in canonical form %q", canonical))}
	}
	if !prefix.IsValid() {
		return nil
	}
	if gw.Is4() != prefix.Addr().Is4() {
		family := "IPv6"
		if prefix.Addr().Is4() {
			family = "IPv4"
		}
		return field.ErrorList{field.Invalid(path, gateway, fmt.Sprintf("must be an %s address, the family of spec.cidr %s", family, prefix))}
	}
	if !prefix.Contains(gw) {
		return field.ErrorList{field.Invalid(path, gateway, fmt.Sprintf("must be inside spec.cidr %s", prefix))}
	}
	if gw == prefix.Addr() {
		return field.ErrorList{field.Invalid(path, gateway, fmt.Sprintf("must not be the network address of %s", prefix))}
	}
	if gw.Is4() && gw == samplecrd.LastAddress(prefix) {
		return field.ErrorList{field.Invalid(path, gateway, fmt.Sprintf("must not be the broadcast address of %s", prefix))}
	}
	return nil
}
