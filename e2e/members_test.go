package e2e

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/members"
)

// memberDoc reads the members document of id.
func memberDoc(t *testing.T, db *mongo.Database, id string) (members.Member, bool) {
	t.Helper()
	var m members.Member
	err := db.Collection(members.CollectionName).FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return m, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return m, true
}

// incarnation is the incarnation a daemon logged at start.
func (d *daemon) incarnation() string {
	l := d.waitLog("cronswap started", func(l logLine) bool { return l.str("msg") == "cronswap started" })
	return l.str("incarnation")
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// One config file with its instance_id copied: the second process is
// refused (exit 1, naming the id, the other's host and incarnation) and
// the first keeps its membership; after the first stops gracefully a new
// process starts at once, and after a SIGKILL a new one starts well within
// the lease.
func TestDuplicateInstanceIDRefusedAndRestartsStart(t *testing.T) {
	uri, db := setup(t)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "dup"})
	first := startDaemon(t, cfg)
	first.waitReady()
	inc := first.incarnation()
	waitFor(t, 30*time.Second, "the first daemon's membership", func() bool {
		m, ok := memberDoc(t, db, "dup")
		return ok && m.Incarnation == inc
	})

	second := startDaemon(t, cfg)
	err := second.wait(2 * members.DefaultLease)
	if code := exitCode(err); code != 1 {
		t.Fatalf("second daemon with the same instance id exited %d (%v), want 1; log:\n%s", code, err, second.rawLog())
	}
	host, _ := os.Hostname()
	out := second.rawLog()
	for _, want := range []string{`instance id "dup" is already in use`, `host "` + host + `"`, "incarnation " + inc, "last heartbeat"} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal lacks %q; log:\n%s", want, out)
		}
	}
	if _, ok := second.findLog(func(l logLine) bool { return l.str("msg") == "full reload" }); ok {
		t.Error("the refused daemon read the schedules")
	}
	if m, _ := memberDoc(t, db, "dup"); m.Incarnation != inc {
		t.Fatalf("membership after the refusal: %+v, want the first daemon's %s", m, inc)
	}

	// A graceful stop removes the document: the next start is immediate.
	first.signal(syscall.SIGTERM)
	if err := first.wait(60 * time.Second); err != nil {
		t.Fatalf("first daemon: %v", err)
	}
	if m, ok := memberDoc(t, db, "dup"); ok {
		t.Fatalf("document left after a graceful stop: %+v", m)
	}
	third := startDaemon(t, cfg)
	third.waitReady()

	// A crash leaves the document with its lease running; the restart on
	// this machine sees the process gone and starts within the lease.
	third.incarnation()
	third.signal(syscall.SIGKILL)
	killed := time.Now()
	fourth := startDaemon(t, cfg)
	joined := fourth.waitLog("joined the members", func(l logLine) bool {
		return strings.HasPrefix(l.str("msg"), "joined the members")
	})
	if r := joined.str("reason"); r != "its process on this machine is gone" {
		t.Errorf("restart after SIGKILL joined with reason %q, want the crashed process seen gone", r)
	}
	if took := time.Since(killed); took > members.DefaultLease+5*time.Second {
		t.Fatalf("restart after SIGKILL joined after %s, want within the lease %s + 5 s", took, members.DefaultLease)
	}
	fourth.waitReady()
	if m, _ := memberDoc(t, db, "dup"); m.Incarnation != fourth.incarnation() {
		t.Fatalf("membership %+v, want the restarted daemon's", m)
	}
}

// A running daemon whose membership document another incarnation takes
// over stops at its next heartbeat with an error and a non-zero exit.
func TestTakenOverDaemonStops(t *testing.T) {
	uri, db := setup(t)
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), InstanceID: "victim"})
	d := startDaemon(t, cfg)
	d.waitReady()
	inc := d.incarnation()
	waitFor(t, 30*time.Second, "the membership", func() bool {
		m, ok := memberDoc(t, db, "victim")
		return ok && m.Incarnation == inc
	})
	now := time.Now()
	other := members.Member{ID: "victim", Host: "elsewhere", PID: 4242, Incarnation: "usurper", StartedAt: now,
		HeartbeatAt: now, LeaseUntil: now.Add(time.Hour), ExpireAt: now.Add(2 * time.Hour)}
	if _, err := db.Collection(members.CollectionName).ReplaceOne(testCtx(t), bson.D{{Key: "_id", Value: "victim"}}, other); err != nil {
		t.Fatal(err)
	}
	err := d.wait(members.DefaultHeartbeat + 30*time.Second)
	if code := exitCode(err); code == 0 {
		t.Fatalf("taken-over daemon exited 0; log:\n%s", d.rawLog())
	}
	if _, ok := d.findLog(func(l logLine) bool {
		return l.str("level") == "ERROR" && strings.HasPrefix(l.str("msg"), "membership taken over") && l.str("other_host") == "elsewhere"
	}); !ok {
		t.Errorf("no error log of the takeover; log:\n%s", d.rawLog())
	}
	if m, _ := memberDoc(t, db, "victim"); m.Incarnation != "usurper" {
		t.Fatalf("the stopped daemon changed the other's document: %+v", m)
	}
}
