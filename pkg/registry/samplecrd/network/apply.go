package network

import (
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// applySchemaErrorPrefix starts the error the generic field manager returns when a server-side
// apply patch does not fit the schema (a field it does not declare, such as spec.bogus, or a
// value of the wrong type). It is a plain error, which the handlers would answer with a 500.
const applySchemaErrorPrefix = "failed to create typed patch object"

// applySchemaError makes a server-side apply patch that does not fit the schema a 400 whose
// message names the field (".spec.bogus: field not declared in schema"), as strict decoding does
// for other writes. Any other error is returned as it is.
func applySchemaError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(apierrors.APIStatus); ok || !strings.HasPrefix(err.Error(), applySchemaErrorPrefix) {
		return err
	}
	// The message goes on "(namespace/name; group/version, Kind=Network): <schema errors>".
	msg := err.Error()
	if _, detail, found := strings.Cut(msg, "): "); found {
		msg = detail
	}
	return apierrors.NewBadRequest("the applied configuration does not match the Network schema: " + msg)
}
