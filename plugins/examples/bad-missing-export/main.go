//go:build wasip1

// Command bad-missing-export has the ABI's bookkeeping exports (through the
// guest package) but no hook at all, so any declared hook is missing.
package main

import _ "github.com/sandgate/sandgate/plugins/guest"

func main() {}
