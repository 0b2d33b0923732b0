//go:build tools

// Package registry pins the container registry that sandgate's pull tests run on
// loopback (github.com/distribution/distribution/v3, the reference registry). It is a
// module of its own so its dependencies never reach the root module; scripts/registry.sh
// builds its cmd/registry into a cache outside the repository.
package registry

import _ "github.com/distribution/distribution/v3/cmd/registry"
