package v1beta1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// addFieldLabelConversions maps v1beta1 field selectors onto the internal (v1) names.
func addFieldLabelConversions(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("Network"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name", "metadata.namespace":
				return label, value, nil
			case "spec.subnet":
				return "spec.cidr", value, nil
			case "spec.gatewayIP":
				return "spec.gateway", value, nil
			default:
				return "", "", fmt.Errorf("field label not supported: %s", label)
			}
		})
}
