package cli_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/schedule"
)

// `schedules list` and `get` show a document the daemons refuse as the
// database holds it, each field read on its own: not the zero values of a
// decoding that stopped at the first field it refused.
func TestListAndGetShowWhatARefusedDocumentHolds(t *testing.T) {
	e := newEnv(t)
	edited := time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)
	blob := strings.Repeat("x", 200<<10)
	oid := bson.NewObjectID()
	insertDocs(t, e.db.Collection("schedules"),
		// Refused whole (more than 64 KiB): no enabled field, so enabled.
		bson.D{{Key: "_id", Value: "big"}, {Key: "cron_expr", Value: "@hourly"}, {Key: "args", Value: bson.D{{Key: "blob", Value: blob}}},
			{Key: "updated_at", Value: edited}},
		// Refused by the check, after every field was decoded.
		bson.D{{Key: "_id", Value: "bad61"}, {Key: "cron_expr", Value: "61 * * * *"}, {Key: "updated_at", Value: edited}},
		// Not a job: the decoder stops at the _id.
		bson.D{{Key: "_id", Value: oid}, {Key: "cron_expr", Value: "@hourly"}},
		// The field the refusal names, as written.
		bson.D{{Key: "_id", Value: "nulled"}, {Key: "cron_expr", Value: "@hourly"}, {Key: "enabled", Value: nil}},
		// Kept on its last known good by the daemon, in its zone.
		bson.D{{Key: "_id", Value: "seoul"}, {Key: "cron_expr", Value: "61 * * * *"}, {Key: "timezone", Value: "Asia/Seoul"},
			{Key: "job", Value: "heartbeat"}},
	)
	t.Setenv(httpapi.EnvToken, "s3cret")
	fakeDaemon(t, e, "node-a", "s3cret",
		schedule.Schedule{ID: "seoul", CronExpr: "0 9 * * *", Timezone: "Asia/Seoul", Job: "heartbeat", Enabled: true},
		schedule.Schedule{ID: "seoul", CronExpr: "61 * * * *", Timezone: "Asia/Seoul", Job: "heartbeat", Enabled: true})

	var big map[string]any
	e.okJSON(&big, "schedules", "get", "big")
	args, _ := big["args"].(map[string]any)
	if big["enabled"] != true || args["blob"] != blob || big["updated_at"] != "2027-03-01T10:00:00Z" ||
		!strings.Contains(big["error"].(string), "bytes, more than the 65536") {
		t.Errorf("get -o json big: enabled %v, updated_at %v, error %v, %d bytes of args",
			big["enabled"], big["updated_at"], big["error"], len(fmtArgs(args)))
	}
	r := e.ok("schedules", "get", "big")
	for _, want := range []string{`(?m)^enabled: +true$`, `(?m)^args: +\{"blob":"xxxx`, `(?m)^updated at: +2027-03-01T10:00:00Z$`} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("get big: no %s in\n%.2000s", want, r.stdout)
		}
	}

	var bad map[string]any
	e.okJSON(&bad, "schedules", "get", "bad61")
	if bad["updated_at"] != "2027-03-01T10:00:00Z" || bad["dst"] != "shift" || bad["enabled"] != true || bad["cron_expr"] != "61 * * * *" {
		t.Errorf("get -o json bad61: %v", bad)
	}
	r = e.ok("schedules", "get", "bad61")
	for _, want := range []string{`(?m)^updated at: +2027-03-01T10:00:00Z$`, `(?m)^dst: +shift$`, `(?m)^error: +.*cron_expr`} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("get bad61: no %s in\n%s", want, r.stdout)
		}
	}

	var list []map[string]any
	e.okJSON(&list, "schedules", "list")
	byID := map[string]map[string]any{}
	for _, v := range list {
		byID[v["id"].(string)] = v
	}
	if v := byID[`{"$oid":"`+oid.Hex()+`"}`]; v == nil || v["invalid_id"] != true || v["enabled"] != true {
		t.Errorf("list -o json: the ObjectId _id row %v, want enabled (no enabled field)", v)
	}
	if v := byID["nulled"]; v == nil || v["enabled"] != false || !strings.Contains(v["error"].(string), "field enabled") {
		t.Errorf("list -o json: nulled %v", v)
	}
	r = e.ok("schedules", "list")
	if got := column(t, r.stdout, "nulled", "ENABLED"); got != "null" {
		t.Errorf("list ENABLED of enabled: null = %q, want it as written\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "seoul", "NEXT RUN"); !strings.HasSuffix(got, "+09:00") {
		t.Errorf("list NEXT RUN of seoul (kept on its last known good) = %q, want it in Asia/Seoul\n%s", got, r.stdout)
	}
}

func fmtArgs(m map[string]any) string {
	s, _ := m["blob"].(string)
	return s
}

// A document whose _id is not a job id (here an ObjectId, as mongosh's
// insertOne without an _id makes) is no job: `schedules get` and `delete`
// address jobs by id and say how to find it, and `schedules list` marks it
// and prints the mongosh command that deletes exactly that document.
func TestListSaysHowToDeleteADocumentThatIsNotAJob(t *testing.T) {
	e := newEnv(t)
	oid := bson.NewObjectID()
	rendering := `{"$oid":"` + oid.Hex() + `"}`
	insertDocs(t, e.db.Collection("schedules"),
		bson.D{{Key: "_id", Value: oid}, {Key: "cron_expr", Value: "@hourly"}},
		bson.D{{Key: "_id", Value: "it's"}, {Key: "cron_expr", Value: "@hourly"}})
	want := `db.getSiblingDB("` + e.db.Name() + `").schedules.deleteOne(EJSON.parse('{"_id":{"$oid":"` + oid.Hex() + `"}}'))`

	r := e.ok("schedules", "list")
	if got := column(t, r.stdout, "_id "+rendering, "STATUS"); got != "not a job" {
		t.Errorf("list STATUS of the ObjectId _id = %q\n%s", got, r.stdout)
	}
	if got := column(t, r.stdout, "it's", "STATUS"); got != "-" {
		t.Errorf("list STATUS of a job = %q\n%s", got, r.stdout)
	}
	if !strings.Contains(r.stderr, "_id "+rendering+" is not a job") || !strings.Contains(r.stderr, "\n  "+want+"\n") ||
		strings.Count(r.stderr, "deleteOne") != 1 {
		t.Errorf("list stderr %q, want the mongosh command %s", r.stderr, want)
	}
	var list []map[string]any
	e.okJSON(&list, "schedules", "list")
	for _, v := range list {
		if got, _ := v["delete_with_mongosh"].(string); (v["invalid_id"] == true) != (got == want) || (v["invalid_id"] != true && got != "") {
			t.Errorf("list -o json: %v, want delete_with_mongosh %s on the invalid _id alone", v, want)
		}
	}
	for _, cmd := range []string{"get", "delete"} {
		for _, id := range []string{rendering, "_id " + rendering} {
			r := e.run("schedules", cmd, id)
			if r.code != 1 || !strings.Contains(r.stderr, "`cronswap schedules list` prints the mongosh command that deletes it") {
				t.Errorf("schedules %s %s: %v", cmd, id, r)
			}
		}
	}
	if r := e.run("schedules", "get", "nope"); r.code != 1 || strings.Contains(r.stderr, "mongosh") {
		t.Errorf("schedules get nope: %v", r)
	}
}

// A field no one reads that looks like one that is read is shown by get,
// as text and JSON, beside the schedule the rest of the document makes;
// a note of the user's own is not.
func TestGetShowsMisspeltFields(t *testing.T) {
	e := newEnv(t)
	insertDocs(t, e.db.Collection("schedules"),
		bson.D{{Key: "_id", Value: "typo"}, {Key: "cron_expr", Value: "0 9 * * *"}, {Key: "enabeld", Value: false},
			{Key: "owner", Value: "team-a"}},
		bson.D{{Key: "_id", Value: "plain"}, {Key: "cron_expr", Value: "0 9 * * *"}, {Key: "owner", Value: "team-a"}})
	var v map[string]any
	e.okJSON(&v, "schedules", "get", "typo")
	ignored, _ := v["ignored_fields"].([]any)
	if v["enabled"] != true || len(ignored) != 1 || fmt.Sprint(ignored[0]) != "map[did_you_mean:enabled field:enabeld]" {
		t.Errorf("get -o json typo: enabled %v, ignored_fields %v", v["enabled"], v["ignored_fields"])
	}
	r := e.ok("schedules", "get", "typo")
	if want := `(?m)^ignored: +enabeld \(no such field; did you mean enabled\?\)$`; !regexp.MustCompile(want).MatchString(r.stdout) {
		t.Errorf("get typo: no %s in\n%s", want, r.stdout)
	}
	v = nil
	e.okJSON(&v, "schedules", "get", "plain")
	if _, ok := v["ignored_fields"]; ok {
		t.Errorf("get -o json plain: ignored_fields %v for a note of the user's own", v["ignored_fields"])
	}
	if r := e.ok("schedules", "get", "plain"); strings.Contains(r.stdout, "ignored:") {
		t.Errorf("get plain:\n%s", r.stdout)
	}
}
