// Package testtls makes the certificates tests need, generated when the
// test runs (no certificate is committed, so none expires): a CA, a
// server certificate for the loopback addresses, client certificates, and
// an HTTPS test server on loopback that may require a client certificate.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	t    testing.TB
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertFile is the CA's certificate as a PEM file (an action's
	// tls.ca_file).
	CertFile string
	serial   int64
}

// NewCA makes a CA named name, its files in a directory of the test.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{t: t, cert: cert, key: key, serial: 1}
	ca.CertFile = writePEM(t, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// Pair is a certificate and its key, in memory and as PEM files.
type Pair struct {
	TLS      tls.Certificate
	CertFile string
	KeyFile  string
}

// Server issues a server certificate for localhost, 127.0.0.1 and ::1.
func (ca *CA) Server(name string) Pair {
	return ca.issue(name, x509.ExtKeyUsageServerAuth, []string{"localhost", name}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback})
}

// Client issues a client certificate with common name name.
func (ca *CA) Client(name string) Pair {
	return ca.issue(name, x509.ExtKeyUsageClientAuth, nil, nil)
}

func (ca *CA) issue(name string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) Pair {
	t := ca.t
	t.Helper()
	ca.serial++
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{
		CertFile: writePEM(t, name+"-cert.pem", "CERTIFICATE", der),
		KeyFile:  writePEM(t, name+"-key.pem", "PRIVATE KEY", keyDER),
	}
	p.TLS, err = tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// NewServer starts an HTTPS server on loopback with a certificate of ca;
// with clientCA set it requires a client certificate signed by it (mTLS).
// It is closed when the test ends.
func NewServer(t testing.TB, ca, clientCA *CA, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	// Refused handshakes are what some tests want: not logged.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server("server").TLS}, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
		srv.TLS.ClientCAs = clientCA.Pool()
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, name, kind string, der []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
