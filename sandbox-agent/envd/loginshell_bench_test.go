package envd

import "testing"

// The benchmarks below read the machine's own /etc and the default user's home (E2B's
// `user` in an e2b image, else the agent's user), as a command in a sandbox does: run
// them in a sandbox image to see the cost on its overlay file system.

// BenchmarkLoginStamp is what every `bash -l -c` command pays to learn whether the
// files a login shell reads changed since its probe.
func BenchmarkLoginStamp(b *testing.B) {
	s := New(Config{})
	b.Cleanup(func() { s.Close() })
	u, err := s.lookupUser("")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.logins.files.stamp(u.Home)
	}
}

// BenchmarkLookupUser is what every process start pays to find the account it runs as.
func BenchmarkLookupUser(b *testing.B) {
	s := New(Config{})
	b.Cleanup(func() { s.Close() })
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.lookupUser(""); err != nil {
			b.Fatal(err)
		}
	}
}
