package faultproxy

import (
	"strings"
)

// URI rewrites the connection string base so that the client connects to
// the proxy instead of base's hosts:
//
//   - the host list (one host, several hosts, or an SRV name) becomes the
//     proxy's Addr, and the scheme becomes mongodb://;
//   - directConnection=true is set, so the driver never follows a replica
//     set's member list around the proxy (replicaSet, if present, is kept and
//     is then checked against the server's set name);
//   - options that conflict with a single direct host or that would hide
//     commands from the proxy are dropped: compressors, connect,
//     loadBalanced, srvMaxHosts and srvServiceName.
//
// Credentials, the database path and all other options are kept. An empty
// base yields "mongodb://ADDR/?directConnection=true".
func (p *Proxy) URI(base string) string {
	return rewriteURI(base, p.Addr())
}

func rewriteURI(base, addr string) string {
	rest := base
	for _, scheme := range []string{"mongodb+srv://", "mongodb://"} {
		if len(rest) >= len(scheme) && strings.EqualFold(rest[:len(scheme)], scheme) {
			rest = rest[len(scheme):]
			break
		}
	}

	// Authority runs to the first '/' or '?'; '@' and '/' inside
	// credentials must be percent-encoded in a valid URI.
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo := ""
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		userinfo = authority[:i+1]
	}

	path, query := tail, ""
	if i := strings.IndexByte(tail, '?'); i >= 0 {
		path, query = tail[:i], tail[i+1:]
	}
	if path == "" {
		path = "/"
	}

	drop := map[string]bool{
		"directconnection": true,
		"compressors":      true,
		"connect":          true,
		"loadbalanced":     true,
		"srvmaxhosts":      true,
		"srvservicename":   true,
	}
	var opts []string
	for _, kv := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		key, _, _ := strings.Cut(kv, "=")
		if drop[strings.ToLower(key)] {
			continue
		}
		opts = append(opts, kv)
	}
	opts = append(opts, "directConnection=true")

	return "mongodb://" + userinfo + addr + path + "?" + strings.Join(opts, "&")
}

// Upstream returns the address a proxy in front of the server that uri
// names relays to: the first host of a mongodb:// connection string, with
// MongoDB's default port 27017 when it gives none. ok is false for any
// other scheme (a mongodb+srv:// string names no host until it is
// resolved).
func Upstream(uri string) (addr string, ok bool) {
	rest, ok := strings.CutPrefix(uri, "mongodb://")
	if !ok {
		return "", false
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	host, _, _ := strings.Cut(rest, ",")
	if !strings.Contains(host, ":") {
		host += ":27017"
	}
	return host, true
}
