package envd

import "time"

// SetLoginProbeTimes sets how long a login shell probe may run and how long a failed
// one is kept, for a test; it returns what restores them.
func SetLoginProbeTimes(timeout, retry time.Duration) (restore func()) {
	oldTimeout, oldRetry := loginProbeTimeout, loginProbeRetry
	loginProbeTimeout, loginProbeRetry = timeout, retry
	return func() { loginProbeTimeout, loginProbeRetry = oldTimeout, oldRetry }
}

// SettleTime is how long after a change to a file a login shell reads the agent waits
// before probing the login shell again.
const SettleTime = settleTime
