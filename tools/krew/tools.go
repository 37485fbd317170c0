//go:build tools

// Package tools pins krew, the kubectl plugin manager the release tests install the CLI archive with.
package tools

import _ "sigs.k8s.io/krew/cmd/krew"
