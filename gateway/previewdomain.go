package gateway

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// CheckPreviewDomain refuses a preview domain that would put previews in the same site
// as the console: equal to, above or below the host of the public URL or address, or
// sharing its registrable domain (eTLD+1). Previews by host must live on a registrable
// domain of their own, so that no preview is same-site with the console (SameSite
// cookies would travel) and a preview cannot set cookies for the console's domain.
func CheckPreviewDomain(previewDomain, publicURL, publicAddress string) error {
	domain := strings.ToLower(strings.TrimSuffix(previewDomain, "."))
	if domain == "" {
		return nil
	}
	if strings.ContainsAny(domain, "/:@ ") || strings.HasPrefix(domain, ".") || net.ParseIP(domain) != nil {
		return fmt.Errorf("preview domain %q: want a DNS name such as previews.example", previewDomain)
	}
	var hosts []string
	if u, err := url.Parse(publicURL); publicURL != "" && err == nil {
		hosts = append(hosts, u.Hostname())
	}
	if publicAddress != "" {
		h := publicAddress
		if hh, _, err := net.SplitHostPort(publicAddress); err == nil {
			h = hh
		}
		hosts = append(hosts, h)
	}
	for _, host := range hosts {
		host = strings.ToLower(strings.TrimSuffix(host, "."))
		if host == "" || net.ParseIP(host) != nil {
			continue // an address shares no cookies or site with a name
		}
		if host == domain || strings.HasSuffix(host, "."+domain) || strings.HasSuffix(domain, "."+host) {
			return fmt.Errorf("preview domain %q and the gateway's host %q are one site: previews must live on a registrable domain of their own", previewDomain, host)
		}
		a, errA := publicsuffix.EffectiveTLDPlusOne(host)
		b, errB := publicsuffix.EffectiveTLDPlusOne(domain)
		if errA == nil && errB == nil && a == b {
			return fmt.Errorf("preview domain %q shares the registrable domain %q with the gateway's host %q: previews must live on a registrable domain of their own", previewDomain, a, host)
		}
	}
	return nil
}
