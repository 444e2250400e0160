package daemon

import (
	"github.com/cronswap/cronswap/internal/admin"
	"github.com/cronswap/cronswap/internal/httpapi"
)

// pageOptions sets the HTTP handler's tokens and the status page's
// actions (docs/http.md#the-pages-actions): the tokens of
// Options.HTTPToken (an operator's) and Options.HTTPTokensFile, and, when
// Options.PageDatabase is set, the actions, which run the command line's
// own code (admin.Store) on it, checking schedules with this service's
// rules: its zone and its handlers. The preview reads through the
// service's own database.
func (s *Service) pageOptions(o *httpapi.Options) error {
	o.Token = s.opts.HTTPToken
	if s.opts.HTTPTokensFile != "" {
		tokens, err := httpapi.LoadTokens(s.opts.HTTPTokensFile)
		if err != nil {
			return err
		}
		o.Tokens = tokens
	}
	rules := admin.Rules{Location: s.opts.Location, Actions: s.registry}
	o.EditChecker = admin.NewStore(s.db).WithRules(rules)
	o.Logger = s.log
	if s.opts.PageDatabase == nil {
		o.WritesOff = "this daemon has no write connection (http.write_mongo_uri)"
		return nil
	}
	o.Operator = admin.NewStore(s.opts.PageDatabase).WithRules(rules)
	operators := 0
	for _, t := range o.Tokens {
		if t.Role == httpapi.RoleOperator {
			operators++
		}
	}
	if o.Token == "" && operators == 0 {
		s.log.Warn("the status page has a write connection but no operator's token: it stays read-only",
			"env", httpapi.EnvToken, "tokens_file", s.opts.HTTPTokensFile)
	}
	return nil
}
