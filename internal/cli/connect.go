package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/config"
)

// clientOptions are the driver options for the configured server. Every
// option in the connection string (tls, tlsCAFile, tlsCertificateKeyFile,
// authSource, authMechanism, replicaSet, …) reaches the driver unchanged;
// the daemon only sets defaults for its app name and timeouts, which the
// connection string overrides (appName, serverSelectionTimeoutMS,
// connectTimeoutMS).
func clientOptions(cfg config.Config) *options.ClientOptions {
	return options.Client().
		SetAppName("cronswap").
		SetServerSelectionTimeout(5 * time.Second).
		SetConnectTimeout(5 * time.Second).
		ApplyURI(cfg.Mongo.URI)
}

// errBadPassword replaces the driver's own message when the password in the
// connection string cannot be decoded: that message quotes the offending
// part of the password (an invalid percent escape).
var errBadPassword = errors.New("the password in the connection string is not valid: percent-encode %, @, : and / in it (e.g. %40 for @)")

// connect returns the daemon's client for the configured server. It does
// not wait for the server: operations retry until it is reachable.
func connect(cfg config.Config) (*mongo.Client, error) {
	client, err := mongo.Connect(clientOptions(cfg))
	if err != nil {
		return nil, clientError(cfg.Mongo.URI, err)
	}
	return client, nil
}

// clientError describes a failure to set up a client for uri without ever
// showing the password.
func clientError(uri string, err error) error {
	if strings.Contains(err.Error(), "password") {
		err = errBadPassword
	}
	return fmt.Errorf("mongo client for %s: %w", config.RedactURI(uri), err)
}
