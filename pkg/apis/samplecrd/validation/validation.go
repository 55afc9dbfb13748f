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
	"strings"

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
	if n.Status.VNI < 0 || n.Status.VNI > MaxVNI {
		allErrs = append(allErrs, field.Invalid(statusPath.Child("vni"), n.Status.VNI, fmt.Sprintf("must be between 0 and %d", MaxVNI)))
	}
	prefix, _ := netip.ParsePrefix(n.Spec.CIDR)
	return append(allErrs, validateNodes(n.Status.Nodes, prefix, statusPath.Child("nodes"))...)
}

// MaxVNI is the largest VXLAN network identifier (24 bits).
const MaxVNI = 1<<24 - 1

// maxNodeBlocks bounds the blocks a node entry lists (the server gives a node at most 64).
const maxNodeBlocks = 256

// maxNodeMessageLength bounds a node's message like a condition's.
const maxNodeMessageLength = 32 * 1024

func validateNodes(nodes []samplecrd.NetworkNodeStatus, prefix netip.Prefix, path *field.Path) field.ErrorList {
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
		allErrs = append(allErrs, validateNodeSegment(&node, prefix, p)...)
	}
	return allErrs
}

// maxLeaseReclaim bounds a node entry's leaseReclaim (it is repeated in every Network's entry).
const maxLeaseReclaim = 128

// validateNodeSegment checks the fields of an entry that describe the node's part of the segment
// and its blocks; prefix is the Network's (invalid when spec.cidr is not a valid prefix).
func validateNodeSegment(node *samplecrd.NetworkNodeStatus, prefix netip.Prefix, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if node.UnderlayAddress != "" {
		a, err := netip.ParseAddr(node.UnderlayAddress)
		switch {
		case err != nil || a.Zone() != "" || a.Is4In6():
			allErrs = append(allErrs, field.Invalid(p.Child("underlayAddress"), node.UnderlayAddress, "must be an IPv4 or IPv6 address"))
		case a.String() != node.UnderlayAddress:
			allErrs = append(allErrs, field.Invalid(p.Child("underlayAddress"), node.UnderlayAddress, fmt.Sprintf("must be in canonical form %q", a.String())))
		}
	}
	if len(node.VXLAN) > 15 {
		allErrs = append(allErrs, field.TooLong(p.Child("vxlan"), "", 15))
	}
	if len(node.Blocks) > maxNodeBlocks {
		allErrs = append(allErrs, field.TooMany(p.Child("blocks"), len(node.Blocks), maxNodeBlocks))
	} else {
		var seen []netip.Prefix
		for j, b := range node.Blocks {
			bp := p.Child("blocks").Index(j)
			block, err := netip.ParsePrefix(b)
			switch {
			case err != nil || block.Addr().Is4In6():
				allErrs = append(allErrs, field.Invalid(bp, b, "must be an IPv4 or IPv6 prefix such as 10.0.0.64/26"))
				continue
			case block.Masked().String() != b:
				allErrs = append(allErrs, field.Invalid(bp, b, fmt.Sprintf("must be in canonical form %q (host bits zero, shortest notation)", block.Masked())))
				continue
			case prefix.IsValid() && (block.Addr().Is4() != prefix.Addr().Is4() || block.Bits() < prefix.Bits() || !prefix.Contains(block.Addr())):
				allErrs = append(allErrs, field.Invalid(bp, b, fmt.Sprintf("must be inside spec.cidr %s", prefix)))
				continue
			}
			for _, other := range seen {
				if other.Overlaps(block) {
					allErrs = append(allErrs, field.Invalid(bp, b, fmt.Sprintf("overlaps block %s of the same entry", other)))
					break
				}
			}
			seen = append(seen, block)
		}
	}
	if node.MTU != 0 && (node.MTU < 68 || node.MTU > 65535) {
		allErrs = append(allErrs, field.Invalid(p.Child("mtu"), node.MTU, "must be between 68 and 65535"))
	}
	switch node.IPAMMode {
	case "", samplecrd.IPAMModeBlocks, samplecrd.IPAMModeLegacy:
	default:
		allErrs = append(allErrs, field.NotSupported(p.Child("ipamMode"), node.IPAMMode, []string{samplecrd.IPAMModeBlocks, samplecrd.IPAMModeLegacy}))
	}
	if node.Leases != nil && *node.Leases < 0 {
		allErrs = append(allErrs, field.Invalid(p.Child("leases"), *node.Leases, "must not be negative"))
	}
	switch r := node.LeaseReclaim; {
	case len(r) > maxLeaseReclaim:
		allErrs = append(allErrs, field.TooLong(p.Child("leaseReclaim"), "", maxLeaseReclaim))
	case r != "" && r != samplecrd.LeaseReclaimContainerRuntime && !strings.HasPrefix(r, samplecrd.LeaseReclaimOffPrefix):
		allErrs = append(allErrs, field.Invalid(p.Child("leaseReclaim"), r,
			fmt.Sprintf("must be %q or start with %q", samplecrd.LeaseReclaimContainerRuntime, samplecrd.LeaseReclaimOffPrefix)))
	}
	return allErrs
}

// ValidateNetworkSpec validates the prefix and the gateway.
func ValidateNetworkSpec(spec *samplecrd.NetworkSpec, path *field.Path) field.ErrorList {
	prefix, allErrs := validateCIDR(spec.CIDR, path.Child("cidr"))
	if spec.Gateway != "" {
		allErrs = append(allErrs, validateGateway(spec.Gateway, prefix, path.Child("gateway"))...)
	}
	if spec.NodeSelector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.NodeSelector,
			metav1validation.LabelSelectorValidationOptions{}, path.Child("nodeSelector"))...)
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
