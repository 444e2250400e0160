package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/config"
)

// TLS, authentication and other driver options are written in the
// connection string and reach the driver unchanged.
func TestClientOptionsPassURIOptionsToTheDriver(t *testing.T) {
	cfg := config.Default()
	cfg.Mongo.URI = "mongodb://ops:s3cret@db1.example:27017,db2.example:27017/?replicaSet=rs0" +
		"&tls=true&tlsInsecure=true&authSource=admin&authMechanism=SCRAM-SHA-256" +
		"&readPreference=primaryPreferred&serverSelectionTimeoutMS=1500&appName=ops-cron"
	opts := clientOptions(cfg)
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	if opts.TLSConfig == nil || !opts.TLSConfig.InsecureSkipVerify {
		t.Errorf("TLS config = %+v, want TLS on with tlsInsecure", opts.TLSConfig)
	}
	if a := opts.Auth; a == nil || a.Username != "ops" || a.Password != "s3cret" || a.AuthSource != "admin" || a.AuthMechanism != "SCRAM-SHA-256" {
		t.Errorf("auth = %+v", opts.Auth)
	}
	if opts.ReplicaSet == nil || *opts.ReplicaSet != "rs0" || len(opts.Hosts) != 2 {
		t.Errorf("replica set %v, hosts %v", opts.ReplicaSet, opts.Hosts)
	}
	if opts.ReadPreference == nil || opts.ReadPreference.Mode().String() != "primaryPreferred" {
		t.Errorf("read preference = %v", opts.ReadPreference)
	}
	// The URI overrides the daemon's own defaults.
	if opts.ServerSelectionTimeout == nil || *opts.ServerSelectionTimeout != 1500*time.Millisecond {
		t.Errorf("server selection timeout = %v, want the URI's 1.5s", opts.ServerSelectionTimeout)
	}
	if opts.AppName == nil || *opts.AppName != "ops-cron" {
		t.Errorf("app name = %v, want the URI's", opts.AppName)
	}
}

func TestClientOptionsDefaults(t *testing.T) {
	cfg := config.Default()
	opts := clientOptions(cfg)
	if opts.AppName == nil || *opts.AppName != "cronswap" {
		t.Errorf("app name = %v", opts.AppName)
	}
	if opts.ServerSelectionTimeout == nil || *opts.ServerSelectionTimeout != 5*time.Second {
		t.Errorf("server selection timeout = %v", opts.ServerSelectionTimeout)
	}
	if opts.TLSConfig != nil || opts.Auth != nil {
		t.Errorf("TLS %v / auth %v without asking", opts.TLSConfig, opts.Auth)
	}
}

// A connection string that does not parse is reported without any part of
// its password, even where the driver's own message would quote it.
func TestConnectErrorsNeverShowThePassword(t *testing.T) {
	for _, uri := range []string{
		"mongodb://bob:Secr3t%Pw@host/",      // the driver would quote "%Pw"
		"mongodb://bob:Secr3t%zzPw@host/",    // and "%zz"
		"mongodb://bob:Secr3tPw@host:99999/", // bad port
		"mongodb://bob:Secr3tPw@@host/",      // unescaped @
		"mongodb://bob:Secr3tPw@host/?tls=maybe",
	} {
		cfg := config.Default()
		cfg.Mongo.URI = uri
		client, err := connect(cfg)
		if err == nil {
			_ = client.Disconnect(context.Background())
			t.Errorf("%s: no error", config.RedactURI(uri))
			continue
		}
		for _, secret := range []string{"Secr3t", "%Pw", "%zz", "Pw"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows part of the password (%q): %v", secret, err)
			}
		}
		if !strings.Contains(err.Error(), "bob:xxxxx@") {
			t.Errorf("error does not name the (redacted) URI: %v", err)
		}
	}
	cfg := config.Default()
	cfg.Mongo.URI = "mongodb://bob:Secr3t%Pw@host/"
	if _, err := connect(cfg); !errors.Is(err, errBadPassword) {
		t.Errorf("undecodable password: %v, want errBadPassword", err)
	}
}
