package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/httpapi"
)

// pageOps is the status page's side that writes (docs/http.md#the-pages-actions):
// its tokens and, when configured, its own connection.
type pageOps struct {
	// tokens are the listener's: CRONSWAP_HTTP_TOKEN (an operator's) and
	// those of http.tokens_file.
	token  string
	tokens []httpapi.Credential
	// operator writes through client, the write connection; nil (and
	// off says why) without one.
	operator httpapi.Operator
	off      string
	client   *mongo.Client
	// checker previews an edit, reading through the daemon's own
	// connection.
	checker httpapi.EditChecker
}

// newPageOps reads the tokens and opens the write connection (without
// waiting for its server). The page's actions run the command line's own
// code (admin.Store), checking schedules with the daemons' rules: this
// daemon's zone and actions.
func newPageOps(cfg config.Config, registry *actions.Registry, db *mongo.Database, log *slog.Logger) (*pageOps, error) {
	p := &pageOps{token: os.Getenv(httpapi.EnvToken)}
	if cfg.HTTP.TokensFile != "" {
		tokens, err := httpapi.LoadTokens(cfg.HTTP.TokensFile)
		if err != nil {
			return nil, err
		}
		p.tokens = tokens
	}
	rules := admin.Rules{Location: cfg.Location, Actions: registry}
	p.checker = admin.NewStore(db).WithRules(rules)
	uri := cfg.HTTP.WriteMongoURI
	if uri == "" {
		p.off = "this daemon has no write connection (http.write_mongo_uri)"
		return p, nil
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName("cronswap-page").
		SetServerSelectionTimeout(5 * time.Second).SetConnectTimeout(5 * time.Second))
	if err != nil {
		return nil, fmt.Errorf("http.write_mongo_uri: %w", clientError(uri, err))
	}
	p.client = client
	p.operator = admin.NewStore(client.Database(cfg.Mongo.Database)).WithRules(rules)
	operators := 0
	for _, t := range p.tokens {
		if t.Role == httpapi.RoleOperator {
			operators++
		}
	}
	if p.token != "" {
		operators++
	}
	switch {
	case operators == 0:
		log.Warn("http.write_mongo_uri is set but no operator's token is: the status page stays read-only",
			"env", httpapi.EnvToken, "tokens_file", cfg.HTTP.TokensFile)
	case uri == cfg.Mongo.URI:
		log.Warn("http.write_mongo_uri is the daemon's own connection: give the page's writes credentials of their own (docs/operations.md)")
	}
	return p, nil
}

// close disconnects the write connection.
func (p *pageOps) close() {
	if p.client != nil {
		disconnect(p.client)
	}
}

// apply sets the page's options of o.
func (p *pageOps) apply(o *httpapi.Options) {
	o.Token, o.Tokens = p.token, p.tokens
	o.Operator, o.WritesOff, o.EditChecker = p.operator, p.off, p.checker
}

// protected reports whether the listener asks for a token.
func (p *pageOps) protected() bool { return p.token != "" || len(p.tokens) > 0 }
