package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/sandgate/sandgate/runtimes"
)

// The engine (dockerd) pulls as root, from the host's network, with the credentials of
// the create: a registry host that is an address of the platform itself (loopback, the
// host's own addresses, link-local such as the cloud metadata service, private ranges)
// would turn a create into requests from the host to its own services. Such registries
// are refused before the engine is asked, unless the operator lists them
// (Options.ImageRegistries, SANDGATE_IMAGE_REGISTRIES). A redirect a registry answers is
// followed by the engine and is not seen here.

// sharedAddressSpace is 100.64.0.0/10 (RFC 6598, carrier-grade NAT), which
// netip.Addr.IsPrivate does not count.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// registryLookupTimeout bounds the name lookup of a registry host.
const registryLookupTimeout = 5 * time.Second

// registryOf is the registry host (with its port, if any) image is pulled from:
// "docker.io" for a bare name.
func registryOf(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", err
	}
	return reference.Domain(named), nil
}

// platformAddr reports whether a is an address of the platform rather than of a
// registry on the internet: unspecified, loopback, link-local, multicast, private,
// shared (CGNAT), or one of own (the host's interfaces).
func platformAddr(a netip.Addr, own []netip.Addr) bool {
	a = a.Unmap()
	if a.IsUnspecified() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsPrivate() || sharedAddressSpace.Contains(a) {
		return true
	}
	for _, o := range own {
		if o.Unmap() == a {
			return true
		}
	}
	return false
}

// hostAddrs are the addresses of the host's interfaces.
func hostAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// registryListed reports whether registry is one of listed (compared as the registries
// rule of admission does: the whole host[:port], case-insensitively).
func registryListed(registry string, listed []string) bool {
	for _, l := range listed {
		if strings.EqualFold(strings.TrimSpace(l), registry) {
			return true
		}
	}
	return false
}

// CheckRegistry refuses a pull of image from a registry that is an address of the
// platform (a literal one, "localhost", or a name resolving to one), unless the operator
// listed that registry. A name that does not resolve is left to the engine, which will
// not reach it either.
func (r *Runtime) CheckRegistry(ctx context.Context, image string) error {
	registry, err := registryOf(image)
	if err != nil {
		return nil // not a name (a full id): the engine refuses to pull it
	}
	if registryListed(registry, r.opts.ImageRegistries) {
		return nil
	}
	host := registry
	if h, _, err := net.SplitHostPort(registry); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	refuse := &runtimes.RegistryRefusedError{Image: image, Registry: registry}
	lower := strings.ToLower(host)
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") {
		return refuse
	}
	own := hostAddrs()
	if a, err := netip.ParseAddr(host); err == nil {
		if platformAddr(a, own) {
			return refuse
		}
		return nil
	}
	if lower == "docker.io" {
		// The engine's default registry: it is reached under names of its own
		// (registry-1.docker.io, or the mirrors the operator configured).
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, registryLookupTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(lctx, "ip", host)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return nil
		}
		return fmt.Errorf("look up registry %s: %w", registry, err)
	}
	for _, a := range addrs {
		if platformAddr(a, own) {
			return refuse
		}
	}
	return nil
}
