package faultproxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/internal/faultproxy"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// TestChangeStreamThroughProxyIntegration runs a real change stream (on the
// testmongo server, or the external one named by CRONSWAP_MONGO_URI) through
// the proxy and injects ChangeStreamHistoryLost on the opening aggregate and
// on a getMore, as failCommand would on mongod.
func TestChangeStreamThroughProxyIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs mongo-server.jar (scripts/mongo.sh build) or " + testmongo.EnvURI)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv, err := testmongo.Start(ctx, testmongo.Options{})
	if err != nil {
		t.Fatalf("testmongo.Start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	upstream, ok := faultproxy.Upstream(srv.URI)
	if !ok {
		t.Skipf("cannot proxy %q (SRV URI)", srv.URI)
	}

	// Not t.Context(): it is canceled before Cleanup functions run, and
	// the client still needs the proxy to disconnect.
	p, err := faultproxy.New(context.Background(), upstream)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() }) // after the client's disconnect
	client := testmongo.ClientFor(t, p.URI(srv.URI))
	coll := testmongo.NewDatabase(t, client).Collection("events")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: 0}}); err != nil { // create the collection
		t.Fatal(err)
	}

	historyLost := faultproxy.ErrorReply{
		Code:     286,
		CodeName: "ChangeStreamHistoryLost",
		Errmsg:   "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
	}

	// 1. Opening the stream fails.
	p.FailNext(faultproxy.IsChangeStreamAggregate, historyLost)
	if _, err := coll.Watch(ctx, mongo.Pipeline{}); !hasCode(err, 286) {
		t.Fatalf("Watch with injected aggregate error: %v, want code 286", err)
	}

	// 2. A healthy stream through the proxy sees inserts.
	cs, err := coll.Watch(ctx, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(200*time.Millisecond))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer cs.Close(context.Background())
	insertAndExpect := func(n int) {
		t.Helper()
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: n}}); err != nil {
			t.Fatal(err)
		}
		if !cs.Next(ctx) {
			t.Fatalf("change stream ended waiting for n=%d: %v", n, cs.Err())
		}
		if got, _ := cs.Current.Lookup("fullDocument", "n").AsInt64OK(); got != int64(n) {
			t.Fatalf("event %v, want insert of n=%d", cs.Current, n)
		}
	}
	insertAndExpect(1)

	// 3. A connection severed under a getMore is a resumable error: the
	// driver re-opens the stream (a second change-stream aggregate, with the
	// resume token) and misses nothing.
	aggregates := p.Stats().Commands["aggregate"]
	p.CutNext(p.ChangeStreamGetMore())
	insertAndExpect(2)
	if st := p.Stats(); st.Cuts != 1 || st.Commands["aggregate"] != aggregates+1 {
		t.Errorf("after CutNext: cuts %d, aggregates %d (was %d); want a cut and a resume",
			st.Cuts, st.Commands["aggregate"], aggregates)
	}

	// 4. ChangeStreamHistoryLost on the getMore is not resumable and
	// surfaces from cs.Err(). The cursor is now the resumed one, which
	// ChangeStreamGetMore must have picked up.
	p.FailNext(p.ChangeStreamGetMore(), historyLost)
	if cs.Next(ctx) {
		t.Fatalf("Next returned %v despite the injected getMore error", cs.Current)
	}
	if !hasCode(cs.Err(), 286) {
		t.Fatalf("cs.Err() = %v, want code 286", cs.Err())
	}
	if st := p.Stats(); st.Injected["aggregate"] != 1 || st.Injected["getMore"] != 1 {
		t.Errorf("injected = %v", st.Injected)
	}
}

func hasCode(err error, code int) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}
