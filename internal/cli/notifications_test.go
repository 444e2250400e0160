package cli_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/notify"
)

// notifications list shows the notifications newest first, filtered by
// status, job and failing; the failing ones with their last error. A
// document written by hand with wrong types is listed, not fatal. Bad
// flags are user errors.
func TestNotificationsList(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	docs := []any{
		notify.Doc{ID: "n1", Kind: notify.KindFailed, JobID: "billing", Sink: "ops", Status: notify.StatusDelivered, Attempts: 1,
			At: now.Add(-3 * time.Minute), CreatedAt: now.Add(-3 * time.Minute), DeliveredAt: now.Add(-3 * time.Minute)},
		notify.Doc{ID: "n2", Kind: notify.KindAbandoned, JobID: "billing", Sink: "ops", Status: notify.StatusPending, Attempts: 4,
			At: now.Add(-2 * time.Minute), CreatedAt: now.Add(-2 * time.Minute), NextAttemptAt: now.Add(30 * time.Second),
			LastError: "webhook ops: HTTP 503 down"},
		notify.Doc{ID: "n3", Kind: notify.KindMissed, JobID: "report", Sink: "ops", Status: notify.StatusFailed, Attempts: 20,
			At: now.Add(-time.Minute), CreatedAt: now.Add(-time.Minute), LastError: "webhook ops: connection refused"},
	}
	if _, err := notify.Collection(e.db).InsertMany(ctx(t), docs); err != nil {
		t.Fatal(err)
	}
	ids := func(args ...string) string {
		var views []map[string]any
		e.okJSON(&views, append([]string{"notifications", "list"}, args...)...)
		var out []string
		for _, v := range views {
			out = append(out, fmt.Sprint(v["notification_id"]))
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "n3,n2,n1"},
		{[]string{"--status", "pending"}, "n2"},
		{[]string{"--failing"}, "n3,n2"},
		{[]string{"--job", "billing"}, "n2,n1"},
		{[]string{"--limit", "1"}, "n3"},
	} {
		if got := ids(c.args...); got != c.want {
			t.Errorf("notifications list %q = %s, want %s", c.args, got, c.want)
		}
	}
	var views []map[string]any
	e.okJSON(&views, "notifications", "list", "--status", "pending")
	if v := views[0]; v["last_error"] != "webhook ops: HTTP 503 down" || v["attempts"] != float64(4) || v["next_attempt_at"] == nil || v["kind"] != "abandoned" {
		t.Errorf("pending view %v", v)
	}
	out := e.ok("notifications", "list", "--failing").stdout
	if !strings.Contains(out, "connection refused") || !strings.Contains(out, "LAST ERROR") || !regexp.MustCompile(`pending +4 +in [0-9]+s`).MatchString(out) {
		t.Errorf("table:\n%s", out)
	}

	if _, err := notify.Collection(e.db).InsertOne(ctx(t), bson.D{{Key: "_id", Value: "by-hand"}, {Key: "attempts", Value: "many"},
		{Key: "at", Value: now}}); err != nil {
		t.Fatal(err)
	}
	e.okJSON(&views, "notifications", "list", "--limit", "1")
	if v := views[0]; v["notification_id"] != "by-hand" || !strings.Contains(fmt.Sprint(v["last_error"]), "unreadable notification") {
		t.Errorf("bad document listed as %v", v)
	}

	for _, args := range [][]string{{"--status", "lost"}, {"--limit", "0"}} {
		if r := e.run(append([]string{"notifications", "list"}, args...)...); r.code != cli.ExitUserError {
			t.Errorf("notifications list %q: %v, want exit %d", args, r, cli.ExitUserError)
		}
	}
}
