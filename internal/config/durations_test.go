package config_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/config"
)

// durationKeys is every duration key of the file, jobs.<name> as jobs.a,
// each with the YAML that sets it (%s: the value). A job's keys sit beside
// an exec, so that the job is valid.
var durationKeys = []struct{ key, yaml string }{
	{"catchup", "catchup: %s"},
	{"starting_deadline", "starting_deadline: %s"},
	{"watch.poll_interval", "watch: {poll_interval: %s}"},
	{"watch.resync_interval", "watch: {resync_interval: %s}"},
	{"watch.backoff_min", "watch: {backoff_min: %s}"},
	{"watch.backoff_max", "watch: {backoff_max: %s}"},
	{"lock.ttl", "lock: {ttl: %s}"},
	{"members.heartbeat", "members: {heartbeat: %s}"},
	{"members.lease", "members: {lease: %s}"},
	{"members.claim_grace", "members: {claim_grace: %s}"},
	{"runs.retention", "runs: {retention: %s}"},
	{"shutdown.grace", "shutdown: {grace: %s}"},
	{"notify.backoff", "notify: {backoff: %s}"},
	{"notify.max_backoff", "notify: {max_backoff: %s}"},
	{"notify.timeout", "notify: {timeout: %s}"},
	{"notify.poll", "notify: {poll: %s}"},
	{"notify.max_age", "notify: {max_age: %s}"},
	{"jobs.a.timeout", "jobs: {a: {exec: [x], timeout: %s}}"},
	{"jobs.a.catchup", "jobs: {a: {exec: [x], catchup: %s}}"},
	{"jobs.a.jitter", "jobs: {a: {exec: [x], jitter: %s}}"},
	{"jobs.a.starting_deadline", "jobs: {a: {exec: [x], starting_deadline: %s}}"},
	{"jobs.a.kill_grace", "jobs: {a: {exec: [x], kill_grace: %s}}"},
	{"jobs.a.retry.backoff", "jobs: {a: {exec: [x], retry: {attempts: 3, backoff: %s}}}"},
	{"jobs.a.retry.max_backoff", "jobs: {a: {exec: [x], retry: {attempts: 3, max_backoff: %s}}}"},
}

// A bare 0 is accepted for every duration key and means what 0s means
// there (the same configuration, or the same refusal where 0 is not
// allowed); any other bare number is refused naming the key and the unit
// to add.
func TestBareZeroDurations(t *testing.T) {
	for _, k := range durationKeys {
		zero, zeroErr := config.Parse(fmt.Sprintf(k.yaml, "0"))
		zeroS, zeroSErr := config.Parse(fmt.Sprintf(k.yaml, "0s"))
		if fmt.Sprint(zeroErr) != fmt.Sprint(zeroSErr) {
			t.Errorf("%s: 0 gives error %v, 0s gives %v", k.key, zeroErr, zeroSErr)
		} else if zeroErr == nil && !reflect.DeepEqual(zero, zeroS) {
			t.Errorf("%s: 0 gives\n %+v\n0s gives\n %+v", k.key, zero, zeroS)
		}
		_, err := config.Parse(fmt.Sprintf(k.yaml, "30"))
		want := k.key + ": 30 has no unit; write 30s"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: 30 gives error %v, want %q", k.key, err, want)
		}
	}
}

// The table above holds every duration field the file can set: a new one
// needs its row.
func TestBareZeroDurationsCoverEveryKey(t *testing.T) {
	var got []string
	listDurations(reflect.TypeFor[config.Config](), "", &got)
	var table []string
	for _, k := range durationKeys {
		table = append(table, k.key)
	}
	slices.Sort(got)
	slices.Sort(table)
	if !slices.Equal(got, table) {
		t.Errorf("duration keys of Config:\n %v\nthe table's:\n %v", got, table)
	}
}

// listDurations appends the keys of the duration fields of t to keys,
// under prefix; a map's entries are named "a".
func listDurations(t reflect.Type, prefix string, keys *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[time.Duration]() {
		*keys = append(*keys, prefix)
		return
	}
	dot := prefix + "."
	if prefix == "" {
		dot = ""
	}
	switch t.Kind() {
	case reflect.Map:
		listDurations(t.Elem(), dot+"a", keys)
	case reflect.Slice:
		listDurations(t.Elem(), prefix+"[0]", keys)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case !f.IsExported() && !f.Anonymous, name == "-":
			case opts == "inline":
				listDurations(f.Type, prefix, keys)
			default:
				listDurations(f.Type, dot+name, keys)
			}
		}
	}
}

// A bare 0 reached through an alias or a merge key is read as 0s too, and
// the error for another bare number gives its line.
func TestBareZeroDurationsThroughAliases(t *testing.T) {
	cfg, err := config.Parse("jobs:\n  a: &base {exec: [x], timeout: 0}\n  b: *base\n  c:\n    <<: *base\n    jitter: 0\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if d := cfg.Jobs[name]; d.Timeout != 0 || d.Jitter != 0 {
			t.Errorf("jobs.%s: timeout %s, jitter %s; want 0s", name, d.Timeout, d.Jitter)
		}
	}
	_, err = config.Parse("lock:\n  ttl: 1m\nmembers:\n  heartbeat: 10\n")
	if err == nil || !strings.Contains(err.Error(), "line 4: members.heartbeat: 10 has no unit; write 10s") {
		t.Errorf("err = %v, want the line and key of the bare 10", err)
	}
	// Unknown keys are still refused next to a bare 0.
	_, err = config.Parse("lock: {ttl: 0, tll: 0}")
	if err == nil || !strings.Contains(err.Error(), "field tll not found") {
		t.Errorf("err = %v, want the unknown key tll refused", err)
	}
}
