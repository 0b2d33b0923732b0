//go:build unix

package main

import "syscall"

// ownerOnlyFiles makes every file and directory this process creates from now on its
// user's alone (umask 077), whatever umask it was started with.
func ownerOnlyFiles() { syscall.Umask(0o077) }
