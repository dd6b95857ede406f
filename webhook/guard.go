package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"

	"github.com/forge-runtime/forge"
)

// Deliveries go where a tenant says: the guard keeps that from becoming a
// way into the server's own network (loopback services, the database, a
// cloud metadata endpoint). It checks the address each connection
// actually dials, after DNS (a name that resolves, or rebinds, to a
// refused address is refused), and redirects are never followed.

var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// refusedKind says why addr may not be reached ("" when it may). With
// --allow-private-webhooks only link-local addresses are: the cloud
// metadata endpoint (169.254.169.254) is one, and no webhook needs it.
func refusedKind(a netip.Addr, allowPrivate bool) string {
	a = a.Unmap()
	if allowPrivate {
		if a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() {
			return "link-local"
		}
		return ""
	}
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate(), sharedSpace.Contains(a):
		return "private"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	}
	return ""
}

// ErrAddressRefused is a delivery target the policy refuses.
var ErrAddressRefused = errors.New("webhook address refused")

func refusal(addr, kind string) error {
	if kind == "link-local" {
		return fmt.Errorf("%w: %s is a link-local address (cloud metadata endpoints among them), which webhooks never reach",
			ErrAddressRefused, addr)
	}
	return fmt.Errorf("%w: %s is a %s address, and webhooks may reach only public addresses unless the operator passes --allow-private-webhooks",
		ErrAddressRefused, addr, kind)
}

// control refuses, at dial time, a connection to a refused address.
func control(allowPrivate bool) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s is not an address", ErrAddressRefused, address)
		}
		if kind := refusedKind(ap.Addr(), allowPrivate); kind != "" {
			return refusal(address, kind)
		}
		return nil
	}
}

// URLChecker checks the URL of a new endpoint (POST /v1/webhooks).
type URLChecker struct {
	AllowPrivate bool
	// Resolver looks names up (nil: net.DefaultResolver).
	Resolver *net.Resolver
}

// MaxURLBytes bounds an endpoint's URL.
const MaxURLBytes = 2048

// CheckURL refuses (forge.ErrInvalid) a URL that is not absolute http(s),
// carries credentials, or names or resolves to a refused address. A name
// that does not resolve is refused too: its deliveries could only fail.
func (c URLChecker) CheckURL(ctx context.Context, raw string) error {
	if len(raw) > MaxURLBytes {
		return forge.Errorf(forge.ErrInvalid, "url is longer than %d bytes", MaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return forge.Errorf(forge.ErrInvalid, "url is not a URL: %v", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return forge.Errorf(forge.ErrInvalid, "url must be an http or https URL (got scheme %q)", u.Scheme)
	}
	if u.User != nil {
		return forge.Errorf(forge.ErrInvalid, "url must not carry credentials (sign with the webhook's secret instead)")
	}
	host := u.Hostname()
	if host == "" {
		return forge.Errorf(forge.ErrInvalid, "url has no host")
	}
	if c.AllowPrivate {
		// Names are checked where they are dialled.
		if a, err := netip.ParseAddr(host); err == nil {
			if kind := refusedKind(a, true); kind != "" {
				return forge.Errorf(forge.ErrInvalid, "url: %v", refusal(host, kind))
			}
		}
		return nil
	}
	if h := strings.ToLower(strings.TrimSuffix(host, ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return forge.Errorf(forge.ErrInvalid, "url: %v", refusal(host, "loopback"))
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if kind := refusedKind(a, false); kind != "" {
			return forge.Errorf(forge.ErrInvalid, "url: %v", refusal(host, kind))
		}
		return nil
	}
	r := c.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return forge.Errorf(forge.ErrInvalid, "url: host %s does not resolve: %v", host, err)
	}
	for _, a := range addrs {
		if kind := refusedKind(a, false); kind != "" {
			return forge.Errorf(forge.ErrInvalid, "url: %s resolves to %v", host, refusal(a.String(), kind))
		}
	}
	return nil
}
