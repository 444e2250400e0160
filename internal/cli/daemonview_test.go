package cli

import (
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/httpapi"
	"github.com/cronswap/cronswap/internal/members"
)

// daemonURL reaches a listener where it can be reached from here: an
// unspecified address at loopback on the same host and at the member's
// host name elsewhere; a loopback listener only from its own host.
func TestDaemonURL(t *testing.T) {
	for _, c := range []struct {
		http, host, want, err string
	}{
		{"127.0.0.1:9090", "here", "http://127.0.0.1:9090", ""},
		{"127.0.0.1:9090", "there", "", `on loopback of host "there"`},
		{"[::1]:9090", "there", "", "on loopback"},
		{"0.0.0.0:9090", "here", "http://127.0.0.1:9090", ""},
		{"[::]:9090", "here", "http://127.0.0.1:9090", ""},
		{"[::]:9090", "there", "http://there:9090", ""},
		{"10.0.0.7:9090", "there", "http://10.0.0.7:9090", ""},
		{"[fd00::7]:9090", "there", "http://[fd00::7]:9090", ""},
		{"", "here", "", "no HTTP address"},
		{"nonsense", "here", "", "nonsense"},
	} {
		got, err := daemonURL(members.Member{ID: "m", Host: c.host, HTTP: c.http}, "here")
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("daemonURL(%q on %s) = %q, %v; want %q", c.http, c.host, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("daemonURL(%q on %s) = %q, %v; want an error saying %q", c.http, c.host, got, err, c.err)
		}
	}
}

// Where the daemons disagree, each one's error is shown with its instance
// id; where they agree, the one text.
func TestDaemonViewMergesTheAnswers(t *testing.T) {
	next := "2030-01-01T02:00:00Z"
	dv := daemonView{answers: []daemonAnswer{
		{instance: "a", schedules: map[string]httpapi.Schedule{"x": {ID: "x", Armed: true, NextRun: &next}, "y": {ID: "y", LastError: "bad"}}},
		{instance: "b", schedules: map[string]httpapi.Schedule{"x": {ID: "x", LastError: "unknown action"}, "y": {ID: "y", LastError: "bad"}}},
	}}
	x, ok := dv.about("x")
	if !ok || x.err != "b: unknown action" || strings.Join(x.instances, ",") != "a,b" || x.next.IsZero() {
		t.Errorf("x: %+v %t", x, ok)
	}
	if y, _ := dv.about("y"); y.err != "bad" || !y.next.IsZero() {
		t.Errorf("y: %+v", y)
	}
	if _, ok := dv.about("z"); ok {
		t.Error("z: held by no daemon, yet answered")
	}
}
