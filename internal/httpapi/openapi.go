package httpapi

import (
	"bytes"
	_ "embed"
	"net/http"
)

// openapiDoc is openapi.json, the OpenAPI 3.1 document of every route.
//
//go:embed openapi.json
var openapiDoc []byte

// OpenAPI returns a copy of the OpenAPI 3.1 document of every route New
// serves, as /api/openapi.json answers it.
func OpenAPI() []byte { return bytes.Clone(openapiDoc) }

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiDoc)
}
