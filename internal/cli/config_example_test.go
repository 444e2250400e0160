package cli

import (
	"context"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/jobs"
)

// The example warm_cache action of the repository's config.yaml answers on
// the local default: its URL is the address the daemon's own listener binds
// (http.listen), on a path that listener answers with that method even
// when CRONSWAP_HTTP_TOKEN is set, so the README's `cronswap run-now
// warm_cache` after scripts/run-local.sh succeeds.
func TestExampleWarmCacheAnswersOnTheLocalDefault(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config.yaml"))
	if err != nil {
		t.Fatalf("read the repository's config.yaml: %v", err)
	}
	cfg, err := config.Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := actions.FromDefinitions(cfg.Jobs)
	if err != nil {
		t.Fatal(err)
	}
	spec, ok := reg.Lookup("warm_cache")
	if !ok {
		t.Fatal("config.yaml has no warm_cache action")
	}
	action, ok := spec.Handler.(*actions.HTTPAction)
	if !ok {
		t.Fatalf("warm_cache is a %T, want an http action", spec.Handler)
	}
	u, err := url.Parse(action.URL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Host != cfg.HTTP.Listen {
		t.Fatalf("warm_cache posts to %s; the local default listener is %s", u.Host, cfg.HTTP.Listen)
	}
	// The daemon's handler, token set, stands in for the listener.
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Token: "s3cret"}))
	defer srv.Close()
	local := *action
	local.URL = srv.URL + u.RequestURI()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := local.Handle(ctx, jobs.Run{JobID: "warm_cache", Slot: time.Now()}); err != nil {
		t.Fatalf("warm_cache against the daemon's listener: %v", err)
	}
}
