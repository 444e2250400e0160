package daemon

import (
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
	opts := ClientOptions(cfg)
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
	opts := ClientOptions(cfg)
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
