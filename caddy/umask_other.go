//go:build !unix

package main

// ownerOnlyFiles does nothing where there is no umask.
func ownerOnlyFiles() {}
