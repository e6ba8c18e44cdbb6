//go:build tools

// Package tools pins the Helm CLI's module for tests/lab/build-helm.sh.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
