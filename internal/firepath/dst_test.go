package firepath

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/scheduler"
)

// zoneType is one local time type of a synthetic time zone.
type zoneType struct {
	offset int32 // seconds east of UTC
	isDST  bool
	abbr   string
}

// tzif returns TZif version 2 data (RFC 8536) of a zone that changes to
// types[i] at Unix time trans[i], with no rule after the last transition.
func tzif(trans []int64, types []zoneType) []byte {
	var chars []byte
	idx := make([]byte, len(types))
	for i, z := range types {
		idx[i] = byte(len(chars))
		chars = append(append(chars, z.abbr...), 0)
	}
	var b bytes.Buffer
	put := func(v any) { _ = binary.Write(&b, binary.BigEndian, v) }
	block := func(wide bool) {
		b.WriteString("TZif2")
		b.Write(make([]byte, 15))
		// isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
		for _, n := range []int{0, 0, 0, len(trans), len(types), len(chars)} {
			put(uint32(n))
		}
		for _, t := range trans {
			if wide {
				put(t)
			} else {
				put(int32(t))
			}
		}
		for i := range trans {
			b.WriteByte(byte(i % len(types)))
		}
		for i, z := range types {
			put(z.offset)
			if z.isDST {
				b.WriteByte(1)
			} else {
				b.WriteByte(0)
			}
			b.WriteByte(idx[i])
		}
		b.Write(chars)
	}
	block(false) // version 1 data, which readers of version 2 skip
	block(true)
	b.WriteString("\n\n") // no rule for times after the last transition
	return b.Bytes()
}

// dstChildEnv marks the process TestDaylightSavingThroughTheFirePath runs
// itself in.
const dstChildEnv = "CRONSWAP_TEST_DST_FIREPATH_CHILD"

// A fixed-time job in a repeated hour runs once, at the first occurrence
// (with dst: plain, at both), and a fixed-time job in a skipped hour runs
// once, at the first instant after the jump (with dst: plain, not at all):
// documents decoded as the daemon decodes them, armed by the real engine,
// fired through a Runner into a recording action.
//
// Waiting for a real transition is not an option, so the zones are
// synthetic, written as TZif files and found by name the way the daemon
// finds any zone, through $ZONEINFO: "Test/FallBack" goes back 10 s, 8 s
// from now, so the wall time 3 s before the change occurs twice, 10 s
// apart; "Test/SpringForward" jumps 10 s ahead at the same instant, so the
// 10 s of wall time after it never occur. Each job's expression names the
// second, minute and hour of one such wall time. Before the change both
// zones run a few seconds ahead of UTC, so that every wall time the test
// uses lies in one minute whatever the second it starts at: robfig's
// plain search finds a repeated wall time again only within the minute
// (from :59 it moves on to the next minute and never returns). A job in UTC
// that fires after everything else bounds the wait for what must not
// happen.
//
// time.LoadLocation reads $ZONEINFO once per process, at its first call,
// so the test runs itself in a process of its own with ZONEINFO set.
func TestDaylightSavingThroughTheFirePath(t *testing.T) {
	if os.Getenv(dstChildEnv) == "" {
		t.Setenv("ZONEINFO", t.TempDir())
		t.Setenv(dstChildEnv, "1")
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "-test.run=^TestDaylightSavingThroughTheFirePath$", "-test.count=1", "-test.v", "-test.timeout=3m")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestDaylightSavingThroughTheFirePath") {
			t.Fatalf("in a process of its own: %v\n%s", err, out)
		}
		t.Logf("in a process of its own:\n%s", out)
		return
	}
	dir := os.Getenv("ZONEINFO")

	base := time.Now().Truncate(time.Second)
	change := base.Add(8 * time.Second)
	// Before the change the zones' clocks are lead seconds ahead of UTC,
	// which puts base at the wall second :20: the wall times below run
	// from :18 (just after the fall back) to :38 (the end of the jump).
	lead := int32((80 - base.Second()) % 60)
	writeZone := func(name string, after zoneType) {
		t.Helper()
		before := zoneType{offset: lead, isDST: !after.isDST, abbr: "ZZA"}
		data := tzif([]int64{base.Add(-24 * time.Hour).Unix(), change.Unix()}, []zoneType{before, after})
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeZone("Test/FallBack", zoneType{offset: lead - 10, isDST: false, abbr: "ZZB"})
	writeZone("Test/SpringForward", zoneType{offset: lead + 10, isDST: true, abbr: "ZZC"})

	// The expression of the wall time both zones show at instant (read as
	// before the change), and of instant in UTC.
	at := func(instant time.Time) string {
		return instant.UTC().Add(time.Duration(lead)*time.Second).Format("5 4 15") + " * * *"
	}
	atUTC := func(instant time.Time) string { return instant.UTC().Format("5 4 15") + " * * *" }
	repeatedFirst := change.Add(-3 * time.Second) // wall time occurs again 10 s later
	repeatedSecond := repeatedFirst.Add(10 * time.Second)
	skipped := change.Add(4 * time.Second) // as a wall time: inside the 10 s the clocks skip
	sentinel := repeatedSecond.Add(2 * time.Second)

	docs := []bson.D{
		{{Key: "_id", Value: "fall_shift"}, {Key: "cron_expr", Value: at(repeatedFirst)}, {Key: "timezone", Value: "Test/FallBack"}},
		{{Key: "_id", Value: "fall_plain"}, {Key: "cron_expr", Value: at(repeatedFirst)}, {Key: "timezone", Value: "Test/FallBack"}, {Key: "dst", Value: "plain"}},
		{{Key: "_id", Value: "spring_shift"}, {Key: "cron_expr", Value: at(skipped)}, {Key: "timezone", Value: "Test/SpringForward"}, {Key: "dst", Value: "shift"}},
		{{Key: "_id", Value: "spring_plain"}, {Key: "cron_expr", Value: at(skipped)}, {Key: "timezone", Value: "Test/SpringForward"}, {Key: "dst", Value: "plain"}},
		{{Key: "_id", Value: "sentinel"}, {Key: "cron_expr", Value: atUTC(sentinel)}, {Key: "timezone", Value: "UTC"}},
	}

	var (
		mu   sync.Mutex
		runs = map[string][]time.Time{}
	)
	slots := func(id string) []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), runs[id]...)
	}
	reg := actions.NewRegistry()
	for _, d := range docs {
		reg.Register(d[0].Value.(string), actions.Action{Handler: jobs.HandlerFunc(func(_ context.Context, f jobs.Run) error {
			mu.Lock()
			defer mu.Unlock()
			runs[f.JobID] = append(runs[f.JobID], f.Slot)
			return nil
		})})
	}
	quiet := slog.New(slog.DiscardHandler)
	runner := NewRunner(RunnerOptions{Registry: reg, InstanceID: "dst-test", Logger: quiet, Workers: 4})
	defer runner.Shutdown(10 * time.Second)
	engine := scheduler.New(scheduler.Options{Shards: 4, Fire: runner.Fire, Policy: reg, Logger: quiet})
	engine.Start()
	defer engine.Stop()

	for _, d := range docs {
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		s, err := schedule.Decode(raw)
		if err != nil {
			t.Fatalf("decode %v: %v", d, err)
		}
		if o := engine.Reload(s); o != scheduler.Added {
			st, _ := engine.Get(s.ID)
			t.Fatalf("reload %s: %s (%s)", s.ID, o, st.LastError)
		}
	}
	if now := time.Now(); now.After(repeatedFirst.Add(-time.Second)) {
		t.Fatalf("armed at %v, too late for the first slot at %v: the machine stalled for seconds", now, repeatedFirst)
	}
	nextRun := func(id string) time.Time {
		t.Helper()
		st, ok := engine.Get(id)
		if !ok || !st.Armed {
			t.Fatalf("%s not armed: %+v", id, st)
		}
		return st.NextRun
	}
	for id, want := range map[string]time.Time{"fall_shift": repeatedFirst, "fall_plain": repeatedFirst, "spring_shift": change} {
		if got := nextRun(id); !got.Equal(want) {
			t.Fatalf("%s: next run %v, want %v", id, got, want)
		}
	}
	if got := nextRun("spring_plain"); got.Before(sentinel) {
		t.Fatalf("spring_plain: next run %v, want none in the skipped seconds (robfig's plain behaviour)", got)
	}

	// Wait for the sentinel; the fires due before it were dispatched
	// before it, and get a few seconds more to be recorded.
	deadline := sentinel.Add(60 * time.Second)
	for len(slots("sentinel")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel did not run by %v", deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for grace := time.Now().Add(5 * time.Second); len(slots("fall_plain")) < 2 && time.Now().Before(grace); {
		time.Sleep(10 * time.Millisecond)
	}

	check := func(id string, want ...time.Time) {
		t.Helper()
		got := slots(id)
		ok := len(got) == len(want)
		for i := 0; ok && i < len(got); i++ {
			ok = got[i].Equal(want[i])
		}
		if !ok {
			t.Errorf("%s ran for slots %v, want %v", id, got, want)
		}
	}
	check("fall_shift", repeatedFirst)
	check("fall_plain", repeatedFirst, repeatedSecond)
	check("spring_shift", change)
	check("spring_plain")
	check("sentinel", sentinel)
	// The jobs that ran once are armed for tomorrow, not for later today.
	for _, id := range []string{"fall_shift", "fall_plain", "spring_shift", "spring_plain"} {
		if next := nextRun(id); next.Sub(base) < 23*time.Hour {
			t.Errorf("%s: next run %v, want the same wall time tomorrow", id, next)
		}
	}
}
