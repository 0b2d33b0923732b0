package gateway

import "testing"

func TestCheckPreviewDomain(t *testing.T) {
	for _, tt := range []struct {
		name, domain, publicURL, address string
		ok                               bool
	}{
		{"unset", "", "https://sandgate.example", "", true},
		{"own registrable domain", "sandgate-previews.example", "https://sandgate.example", "", true},
		{"loopback gateway", "preview.localhost", "", "127.0.0.1:8080", true},
		{"subdomain of the console", "previews.sandgate.example", "https://sandgate.example", "", false},
		{"sibling under one registrable domain", "previews.corp.example", "https://console.corp.example", "", false},
		{"the console's own host", "sandgate.example", "", "sandgate.example:443", false},
		{"parent of the console", "example", "https://sandgate.example", "", false},
		{"not a name", "previews.example/x", "", "", false},
		{"an address", "10.0.0.1", "", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPreviewDomain(tt.domain, tt.publicURL, tt.address)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckPreviewDomain(%q, %q, %q) = %v, want ok=%v", tt.domain, tt.publicURL, tt.address, err, tt.ok)
			}
		})
	}
}
