package changefeed

// Host is what the change feed needs of the gateway's core. The core implements it; the
// store the Manager is given directly.
type Host interface {
	// Resubscribed is told that the subscription to changes holds again: changes may
	// have been missed meanwhile (the core reads API key bindings again).
	Resubscribed()
	// OtherChange is handed every published change first, and reports whether it was
	// one of the core's own (an API key's binding) rather than a sandbox's.
	OtherChange(id string) bool
}
