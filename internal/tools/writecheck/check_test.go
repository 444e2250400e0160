package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

const fixture = "testdata/mod"

// Every kind of handle is found where it is written, and nothing else:
// not reads, not index builds, not other collections, not tests, not the
// owner, not a nested module.
func TestFindsWritesOutsideTheOwner(t *testing.T) {
	found, err := Check(fixture)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range found {
		got = append(got, v.Pos+" "+v.Call)
	}
	want := []string{
		"bad/bad.go:13 s.db.Collection(record.LocksCollection).UpdateOne",
		`bad/bad.go:14 s.db.Collection("job_pauses").DeleteMany`,
		"bad/bad.go:15 record.PausesCollectionOf(s.db).ReplaceOne",
		"bad/bad.go:20 coll.InsertOne",
		"bad/bad.go:22 locks.BulkWrite",
		"bad/bad.go:24 p.FindOneAndUpdate",
		"bad/bad.go:28 s.runs.DeleteOne",
		"bad/bad.go:30 t.locked.UpdateMany",
		"bad/bad.go:37 pausesColl(s).UpdateOne",
		"record/record.go:7 runs.UpdateMany",
	}
	if !slices.Equal(got, want) {
		t.Errorf("found\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// The command fails (exit 1) and names each write; a clean tree passes.
func TestRunExitCodes(t *testing.T) {
	var errOut bytes.Buffer
	if code := run(fixture, &errOut); code != 1 || !strings.Contains(errOut.String(), "bad/bad.go:13") {
		t.Errorf("run on the fixture: exit %d, %q; want 1 naming bad/bad.go:13", code, errOut.String())
	}
	errOut.Reset()
	if code := run(fixture+"/ok", &errOut); code != 0 || errOut.Len() != 0 {
		t.Errorf("run on a clean package: exit %d, %q; want 0 and nothing said", code, errOut.String())
	}
}
