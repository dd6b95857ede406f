package mcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NetworkPolicy says which addresses MCP url servers may connect to. Its
// zero value lets them reach public addresses only: a tenant's URL must not
// become a way into the server's own network (loopback services, the
// database, the cloud's metadata endpoint holding its credentials).
//
// The check runs on the address each connection actually dials, after DNS
// resolution (a name that resolves, or later rebinds, to a refused address
// is refused), and again on every redirect.
type NetworkPolicy struct {
	// AllowPrivate lets url servers reach loopback (127.0.0.0/8, ::1),
	// private (RFC 1918, fc00::/7), shared (100.64.0.0/10) and unspecified
	// addresses.
	AllowPrivate bool
	// PrivateAllowed, when set and AllowPrivate is false, decides at each
	// server start and agent check whether private addresses are allowed
	// (forge serve: while it has no API key, so serves one tenant on
	// loopback).
	PrivateAllowed func(ctx context.Context) bool
	// AllowLinkLocal lets url servers reach link-local addresses
	// (169.254.0.0/16, fe80::/10) and the cloud metadata endpoints
	// (169.254.169.254, fd00:ec2::254, ...). Never implied by AllowPrivate.
	AllowLinkLocal bool
}

// AddressRefusedError is a connection an MCP url server's URL led to that
// the NetworkPolicy refuses.
type AddressRefusedError struct {
	// Addr is the address refused ("127.0.0.1:8080", or a host name
	// refused by name such as "localhost").
	Addr string
	// Kind says what it is: "loopback", "private", "link-local", ...
	Kind string
	// Hint says how the operator can allow it ("" when nothing can).
	Hint string
	// Redirect is the URL of a redirect that led there ("" otherwise).
	Redirect string
}

func (e *AddressRefusedError) Error() string {
	var b strings.Builder
	if e.Redirect != "" {
		fmt.Fprintf(&b, "it redirected to %s, and ", e.Redirect)
	}
	fmt.Fprintf(&b, "connecting to %s was refused: it is %s %s address, and MCP url servers may reach only public addresses",
		e.Addr, article(e.Kind), e.Kind)
	if e.Hint != "" {
		b.WriteString(" unless the operator allows it (" + e.Hint + ")")
	}
	return b.String()
}

func article(s string) string {
	if s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an"
	}
	return "a"
}

// Kinds of addresses, by how they may be allowed.
type addrClass int

const (
	classPublic    addrClass = iota
	classPrivate             // NetworkPolicy.AllowPrivate
	classLinkLocal           // NetworkPolicy.AllowLinkLocal
	classNever               // no TCP server there (multicast, broadcast, reserved)
)

const (
	hintPrivate   = "forge serve --allow-private-mcp-urls, or mcp.allow_private_urls: true in forge.yaml"
	hintLinkLocal = "forge serve --allow-link-local-mcp-urls, or mcp.allow_link_local_urls: true in forge.yaml"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

var (
	// metadataAddrs are cloud instance metadata endpoints (credentials,
	// user data): AWS, GCP, Azure, OpenStack, DigitalOcean (169.254.169.254),
	// AWS ECS tasks (169.254.170.2), AWS over IPv6 (fd00:ec2::254), Alibaba
	// (100.100.100.200), Azure's wire server (168.63.129.16), Oracle
	// (192.0.0.192). Some sit in ranges otherwise merely private, or public.
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("169.254.170.2"),
		netip.MustParseAddr("fd00:ec2::254"), netip.MustParseAddr("100.100.100.200"),
		netip.MustParseAddr("168.63.129.16"), netip.MustParseAddr("192.0.0.192"),
	}
	sharedV4    = prefixes("100.64.0.0/10")                    // carrier-grade NAT (RFC 6598)
	thisNetV4   = prefixes("0.0.0.0/8")                        // "this network": 0.x reaches the host itself
	benchmarkV4 = prefixes("198.18.0.0/15")                    // RFC 2544, used inside networks
	neverV4     = prefixes("240.0.0.0/4", "192.0.0.0/24")      // reserved, IETF protocol assignments
	embedV6     = prefixes("64:ff9b::/96", "64:ff9b:1::/48")   // NAT64: an IPv4 address in the last 32 bits
	sixToFour   = netip.MustParsePrefix("2002::/16")           // 6to4: an IPv4 address in bits 16..48
	siteLocalV6 = prefixes("fec0::/10")                        // deprecated site-local
	v4Broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255}) // limited broadcast
)

func inAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// classify says what a is, as the policy sees it: the stricter of a
// itself and the IPv4 address it embeds (mapped, NAT64, 6to4).
func classify(a netip.Addr) (addrClass, string) {
	a = a.Unmap().WithZone("")
	c, kind := classifyOne(a)
	if a.Is6() {
		var v4 netip.Addr
		switch {
		case inAny(embedV6, a):
			b := a.As16()
			v4 = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case sixToFour.Contains(a):
			b := a.As16()
			v4 = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		}
		if v4.IsValid() {
			if c4, k4 := classifyOne(v4); c4 > c {
				c, kind = c4, k4+" (embedded in "+a.String()+")"
			}
		}
	}
	return c, kind
}

func classifyOne(a netip.Addr) (addrClass, string) {
	for _, m := range metadataAddrs {
		if a == m {
			return classLinkLocal, "cloud metadata"
		}
	}
	switch {
	case a.IsLoopback():
		return classPrivate, "loopback"
	case a.IsUnspecified(), a.Is4() && inAny(thisNetV4, a):
		return classPrivate, "unspecified"
	case a.IsPrivate(), a.Is6() && inAny(siteLocalV6, a):
		return classPrivate, "private"
	case a.Is4() && inAny(sharedV4, a):
		return classPrivate, "shared (carrier-grade NAT)"
	case a.Is4() && inAny(benchmarkV4, a):
		return classPrivate, "private (benchmarking)"
	case a.IsLinkLocalUnicast():
		return classLinkLocal, "link-local"
	case a.IsMulticast():
		return classNever, "multicast"
	case a == v4Broadcast:
		return classNever, "broadcast"
	case a.Is4() && inAny(neverV4, a):
		return classNever, "reserved"
	}
	return classPublic, ""
}

// classifyName says what a host name is when it means this machine or its
// metadata endpoint whatever DNS says (refused by name, before any
// lookup); other names are classified by the addresses they resolve to.
func classifyName(host string) (addrClass, string) {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	switch {
	case h == "localhost", strings.HasSuffix(h, ".localhost"), h == "localhost.localdomain",
		h == "ip6-localhost", h == "ip6-loopback":
		return classPrivate, "loopback"
	case h == "metadata.google.internal", h == "metadata":
		return classLinkLocal, "cloud metadata"
	}
	return classPublic, ""
}

// addrGuard enforces a NetworkPolicy on one server's connections and
// remembers the last refusal (what the error of a failed start or call
// reports: the HTTP client's own error can hide it).
type addrGuard struct {
	allowPrivate   bool
	allowLinkLocal bool
	// public, when set, treats matching addresses as public (tests, whose
	// servers are all on loopback, stand up a "public" server with it).
	public func(netip.AddrPort) bool

	mu   sync.Mutex // guards the following
	last *AddressRefusedError
}

// refuse is the refusal of an address of class c, or nil when allowed.
func (g *addrGuard) refuse(addr string, c addrClass, kind string) *AddressRefusedError {
	switch c {
	case classPrivate:
		if g.allowPrivate {
			return nil
		}
		return &AddressRefusedError{Addr: addr, Kind: kind, Hint: hintPrivate}
	case classLinkLocal:
		if g.allowLinkLocal {
			return nil
		}
		return &AddressRefusedError{Addr: addr, Kind: kind, Hint: hintLinkLocal}
	case classNever:
		return &AddressRefusedError{Addr: addr, Kind: kind}
	}
	return nil
}

// checkHost vets a URL's host before any connection: a literal address,
// or a name that means this machine. Other names are vetted when dialed.
func (g *addrGuard) checkHost(u *url.URL) *AddressRefusedError {
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		port, err := strconv.ParseUint(effectivePort(u), 10, 16)
		if err == nil && g.public != nil && g.public(netip.AddrPortFrom(a, uint16(port))) {
			return nil
		}
		c, kind := classify(a)
		return g.refuse(u.Host, c, kind)
	}
	c, kind := classifyName(host)
	return g.refuse(u.Host, c, kind)
}

// control runs before each connect, on the address being dialed.
func (g *addrGuard) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return g.note(&AddressRefusedError{Addr: address, Kind: "unparsable"})
	}
	if g.public != nil && g.public(ap) {
		return nil
	}
	c, kind := classify(ap.Addr())
	if r := g.refuse(address, c, kind); r != nil {
		return g.note(r)
	}
	return nil
}

func (g *addrGuard) note(r *AddressRefusedError) error {
	g.mu.Lock()
	g.last = r
	g.mu.Unlock()
	return r
}

// redirected is the error of a request a redirect created (to target)
// whose dial was refused: the refusal, saying it came from the redirect.
func (g *addrGuard) redirected(err error, target *url.URL) error {
	var r *AddressRefusedError
	if !errors.As(err, &r) || r.Redirect != "" {
		return err
	}
	c := *r
	c.Redirect = redactURL(target)
	return g.note(&c)
}

// refusal is the last connection refused, or nil.
func (g *addrGuard) refusal() *AddressRefusedError {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

const maxRedirects = 5

// checkRedirect follows at most maxRedirects redirects, each to an allowed
// address (the dial checks the resolved one; this names the redirect in
// the error). Headers and token go only to the declared origin
// (httpRoundTripper).
func (g *addrGuard) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if r := g.checkHost(req.URL); r != nil {
		r.Redirect = redactURL(req.URL)
		return g.note(r)
	}
	return nil
}

// sameServer reports whether to is the server at from: the same origin,
// or from http to https on the same host.
func sameServer(from, to *url.URL) bool {
	if !strings.EqualFold(from.Hostname(), to.Hostname()) {
		return false
	}
	if from.Scheme == to.Scheme {
		return effectivePort(from) == effectivePort(to)
	}
	return from.Scheme == "http" && to.Scheme == "https" && effectivePort(from) == "80" && effectivePort(to) == "443"
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// redactURL is u without its user info and query (they may hold secrets).
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.Fragment = ""
	return c.String()
}

// newGuard returns the guard of a server starting now.
func (m *Manager) newGuard(ctx context.Context) *addrGuard {
	p := m.opts.Network
	return &addrGuard{
		allowPrivate:   p.AllowPrivate || (p.PrivateAllowed != nil && p.PrivateAllowed(ctx)),
		allowLinkLocal: p.AllowLinkLocal,
		public:         m.opts.treatAsPublic,
	}
}

// httpClient is the HTTP client of one url server: direct connections
// (no proxy from the environment: the guard must see the real address)
// through the guard.
func (g *addrGuard) httpClient(rt *httpRoundTripper) (*http.Client, *http.Transport) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = d.DialContext
	rt.base = tr
	rt.guard = g
	return &http.Client{Transport: rt, CheckRedirect: g.checkRedirect}, tr
}

// checkURL vets an url server's URL when an agent is defined: its scheme,
// and a host that is a refused address or name.
func (m *Manager) checkURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("url must be an absolute http or https URL")
	}
	if r := m.newGuard(ctx).checkHost(u); r != nil {
		return r
	}
	return nil
}
