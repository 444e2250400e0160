package cli_test

import (
	"reflect"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/cli"
)

// `schedules set --dst` writes the dst field, keeps it when not named and
// removes it with ""; get and list show the mode (shift when the document
// has none); a bad mode is refused before anything is written, and a
// stored bad one is shown with its error, naming the field.
func TestSchedulesSetDST(t *testing.T) {
	e := newEnv(t)
	dstOf := func(id string) any {
		t.Helper()
		var v map[string]any
		e.okJSON(&v, "schedules", "get", id)
		return v["dst"]
	}

	e.ok("schedules", "set", "billing", "--cron", "30 1 * * *", "--tz", "America/New_York", "--dst", "plain")
	if doc := e.rawSchedule("billing"); doc["dst"] != "plain" {
		t.Fatalf("stored %v, want dst plain", doc)
	}
	if got := dstOf("billing"); got != "plain" {
		t.Errorf("get -o json dst = %v, want plain", got)
	}
	if r := e.ok("schedules", "get", "billing"); !strings.Contains(r.stdout, "dst:") || !strings.Contains(r.stdout, "plain") {
		t.Errorf("get does not show the mode:\n%s", r.stdout)
	}

	// A retime without --dst keeps it.
	e.ok("schedules", "set", "billing", "--cron", "0 1 * * *")
	if doc := e.rawSchedule("billing"); doc["dst"] != "plain" || doc["cron_expr"] != "0 1 * * *" {
		t.Fatalf("retime without --dst: %v", doc)
	}
	e.ok("schedules", "set", "billing", "--cron", "0 1 * * *", "--dst", "shift")
	if doc := e.rawSchedule("billing"); doc["dst"] != "shift" {
		t.Fatalf("--dst shift stored %v", doc)
	}
	e.ok("schedules", "set", "billing", "--cron", "0 1 * * *", "--dst", "")
	if doc := e.rawSchedule("billing"); doc["dst"] != nil {
		t.Fatalf(`--dst "" should remove the field: %v`, doc)
	}
	if got := dstOf("billing"); got != "shift" {
		t.Errorf("get -o json dst without the field = %v, want shift (the default)", got)
	}

	before := e.rawSchedule("billing")
	for _, v := range []string{"summer", "Plain", "true"} {
		r := e.run("schedules", "set", "billing", "--cron", "0 1 * * *", "--dst", v)
		if r.code != cli.ExitUserError || !strings.Contains(r.stderr, "--dst") ||
			!strings.Contains(r.stderr, "unknown daylight-saving mode") || !strings.Contains(r.stderr, "nothing written") {
			t.Errorf("--dst %s: %v", v, r)
		}
	}
	if after := e.rawSchedule("billing"); !reflect.DeepEqual(after, before) {
		t.Errorf("a refused set changed the document:\n%v\n%v", before, after)
	}

	// A document written around the CLI with a bad mode: listed with its
	// error, and a retime that does not fix it is refused.
	if _, err := e.db.Collection("schedules").InsertOne(ctx(t), bson.D{{Key: "_id", Value: "typo"},
		{Key: "cron_expr", Value: "30 1 * * *"}, {Key: "dst", Value: "plian"}}); err != nil {
		t.Fatal(err)
	}
	var list []map[string]any
	e.okJSON(&list, "schedules", "list")
	if len(list) != 2 || list[1]["id"] != "typo" || list[1]["dst"] != "plian" ||
		!strings.Contains(list[1]["error"].(string), "field dst") {
		t.Fatalf("list -o json = %v", list)
	}
	if r := e.run("schedules", "set", "typo", "--cron", "0 2 * * *"); r.code != cli.ExitUserError || !strings.Contains(r.stderr, "field dst") {
		t.Errorf("retime over a stored bad dst: %v", r)
	}
	e.ok("schedules", "set", "typo", "--cron", "0 2 * * *", "--dst", "plain")
	if got := dstOf("typo"); got != "plain" {
		t.Errorf("after fixing dst: %v", got)
	}
}
