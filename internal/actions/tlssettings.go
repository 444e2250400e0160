package actions

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// TLSSettings configure an https action's connection. The files are read
// when the daemon starts (a rotated certificate needs a restart).
type TLSSettings struct {
	// CAFile holds the PEM certificates of the CAs the server's
	// certificate must chain to, instead of the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile hold the PEM client certificate and its key
	// (mTLS); both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate must hold (and the
	// SNI sent), when it is not the URL's host.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate; refused unless
	// the URL's host is a loopback address (checked by internal/config,
	// which owns that rule).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// check refuses TLS settings for an http URL, and a certificate without
// its key or a key without its certificate. It reads no file (Start does).
func (t *TLSSettings) check(rawURL string) error {
	if t == nil {
		return nil
	}
	if u, err := url.Parse(rawURL); err == nil && !strings.EqualFold(u.Scheme, "https") {
		return fmt.Errorf("http.tls: the url %q is not https", u.Redacted())
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return errors.New("http.tls.cert_file without key_file: give both (the client certificate and its private key)")
	case t.KeyFile != "" && t.CertFile == "":
		return errors.New("http.tls.key_file without cert_file: give both (the client certificate and its private key)")
	}
	return nil
}

// config reads the files and returns the client's TLS configuration, and
// the key file's content (a secret). Its errors name the file and what is
// wrong with it.
func (t *TLSSettings) config() (*tls.Config, string, error) {
	c := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, "", fmt.Errorf("http.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", fmt.Errorf("http.tls.ca_file %s: no PEM certificate in it", t.CAFile)
		}
		c.RootCAs = pool
	}
	var key string
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, "", fmt.Errorf("http.tls.cert_file %s, key_file %s: %w", t.CertFile, t.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
		b, err := os.ReadFile(t.KeyFile)
		if err != nil {
			return nil, "", fmt.Errorf("http.tls.key_file: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	return c, key, nil
}
