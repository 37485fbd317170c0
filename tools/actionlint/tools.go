//go:build tools

// Pins actionlint, which `make lint` runs over .github/workflows.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
