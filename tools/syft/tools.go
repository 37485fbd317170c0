//go:build tools

// Package tools pins syft, the SBOM tool the image test reads the controller image with.
package tools

import _ "github.com/anchore/syft/cmd/syft"
