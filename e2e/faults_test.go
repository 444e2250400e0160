package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/faultproxy"
)

func hostOf(t *testing.T, uri string) string {
	t.Helper()
	_, rest, ok := strings.Cut(uri, "://")
	if !ok {
		t.Fatalf("odd uri %q", uri)
	}
	host, _, _ := strings.Cut(rest, "/")
	if strings.Contains(host, ",") || strings.Contains(host, "@") {
		t.Skipf("fault proxy tests need a single-host URI without credentials, got a multi-host/authenticated one")
	}
	return host
}

func newProxy(t *testing.T, uri string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(context.Background(), hostOf(t, uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// schedulesStream matches the opening of the schedules change stream (the
// daemon also watches blackouts and triggers, each with a stream of its
// own).
var schedulesStream = faultproxy.All(faultproxy.IsChangeStreamAggregate, faultproxy.Collection("schedules"))

var historyLost = faultproxy.ErrorReply{
	Code: 286, CodeName: "ChangeStreamHistoryLost",
	Errmsg: "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
	Labels: []string{"NonResumableChangeStreamError"},
}

func TestLostPositionOnResumeFallsBackToFullReload(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: uri, Database: db.Name()}))
	d.waitReady()
	waitToken(t, db)
	d.signal(syscall.SIGKILL)
	editWhileDown(t, db, 1)

	// The stored token cannot be resumed from: the server says its history is gone.
	p := newProxy(t, uri)
	p.FailNext(schedulesStream, historyLost)
	d2 := startDaemon(t, writeConfig(t, daemonConfig{URI: p.URI(uri), Database: db.Name()}))
	d2.waitReady()
	l := d2.waitLog("refused token", func(l logLine) bool {
		return strings.Contains(l.str("msg"), "refused the stored resume token")
	})
	if !strings.Contains(l.str("error"), "ChangeStreamHistoryLost") {
		t.Fatalf("log does not say why: %v", l)
	}
	d2.waitLog("full reload for the refused token", func(l logLine) bool {
		return l.str("msg") == "full reload" && l.str("reason") == "token_refused"
	})
	checkEditsWhileDown(t, d2, db, 1)

	// It keeps streaming.
	mongosh(t, uri, db.Name(), seedOneLiner)
	waitFor(t, 5*time.Second, "edit after fallback", func() bool { return d2.schedules()["daily_report"].CronExpr == "0 8 * * *" })

	// A lost position in the middle of streaming: the next getMore answers 286.
	p.FailNext(faultproxy.CommandName("getMore"), historyLost)
	d2.waitLog("lost position", func(l logLine) bool {
		return strings.Contains(l.str("msg"), "lost its resume position")
	})
	d2.waitLog("full reload for the lost position", func(l logLine) bool {
		return l.str("msg") == "full reload" && l.str("reason") == "lost_position"
	})
	mongosh(t, uri, db.Name(), `db.schedules.updateOne({ _id: "daily_report" }, { $set: { cron_expr: "30 8 * * *", updated_at: new Date() } })`)
	waitFor(t, 5*time.Second, "edit after lost position", func() bool {
		return d2.schedules()["daily_report"].CronExpr == "30 8 * * *"
	})
	waitFor(t, 5*time.Second, "armed equals collection", func() bool { return equalMaps(d2.armedExprs(), collectionExprs(t, db)) })
}

func TestMalformedTokenDocumentIsDropped(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name()})
	d := startDaemon(t, cfg)
	d.waitReady()
	waitToken(t, db)
	d.signal(syscall.SIGKILL)
	setToken(t, db, "not a token")
	editWhileDown(t, db, 1)
	d2 := startDaemon(t, cfg)
	d2.waitReady()
	d2.waitLog("malformed token", func(l logLine) bool {
		return strings.Contains(l.str("msg"), "stored resume token is malformed")
	})
	checkEditsWhileDown(t, d2, db, 1)
	// A fresh, well-formed token replaces it.
	waitFor(t, 10*time.Second, "new token stored", func() bool {
		raw, err := db.Collection("resume_tokens").FindOne(context.Background(), bson.D{{Key: "_id", Value: "e2e-1"}}).Raw()
		return err == nil && raw.Lookup("token").Type == bson.TypeEmbeddedDocument
	})
	mongosh(t, uri, db.Name(), seedOneLiner)
	waitFor(t, 5*time.Second, "streaming", func() bool { return d2.schedules()["daily_report"].CronExpr == "0 8 * * *" })
}

func TestNetworkOutageReconnectsFromLastPosition(t *testing.T) {
	uri, db := setup(t)
	insert(t, db, sched("daily_report", "0 9 * * *"), sched("heartbeat", "@hourly"))
	p := newProxy(t, uri)
	d := startDaemon(t, writeConfig(t, daemonConfig{URI: p.URI(uri), Database: db.Name()}))
	d.waitReady()
	waitToken(t, db)

	// Sever every connection and refuse new ones for longer than the
	// driver's own single resume attempt can bridge (server selection gives
	// up after 5 s); meanwhile an edit lands on the server directly.
	p.Outage(7 * time.Second)
	mongosh(t, uri, db.Name(), seedOneLiner)
	d.waitLog("reconnect with backoff", func(l logLine) bool {
		return l.str("msg") == "reconnecting after error" && l["delay"] != nil && l["attempt"] != nil
	})
	waitFor(t, 20*time.Second, "edit made during the outage applied", func() bool {
		return d.schedules()["daily_report"].CronExpr == "0 8 * * *"
	})
	d.waitReady()
	// It resumed from its position: the only full reload is the start-up one.
	var st struct {
		FullReloads int64 `json:"full_reloads"`
		Reconnects  int64 `json:"reconnects"`
	}
	d.get("/api/status", &st)
	if st.FullReloads != 1 || st.Reconnects < 1 {
		t.Fatalf("status after outage: %+v, want 1 full reload and >= 1 reconnect", st)
	}
	if _, ok := d.findLog(func(l logLine) bool { return l.str("msg") == "full reload" && l.str("reason") != "startup" }); ok {
		t.Fatal("a transient outage caused a full reload")
	}
}
