//go:build tools

// Package helm pins the Helm command that the chart's tests (deploy/helm_test.go) render,
// lint and install deploy/helm/sandgate with. It is a module of its own so its
// dependencies never reach the root module; scripts/helm.sh builds its cmd/helm into a
// cache outside the repository.
package helm

import _ "helm.sh/helm/v4/cmd/helm"
