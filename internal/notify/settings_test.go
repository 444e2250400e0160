package notify

import (
	"strings"
	"testing"
	"time"
)

func TestWebhookExpand(t *testing.T) {
	w := Webhook{Name: "ops", URL: "https://h.example/${PATH_TOKEN}?a=$b", Headers: map[string]string{"Authorization": "Bearer ${TOK}"}}
	env := map[string]string{"PATH_TOKEN": "p1", "TOK": "t1"}
	u, h, err := w.Expand(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil || u != "https://h.example/p1?a=$b" || h["Authorization"] != "Bearer t1" {
		t.Fatalf("Expand = %q %v %v", u, h, err)
	}
	_, _, err = w.Expand(func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "PATH_TOKEN, TOK") {
		t.Fatalf("Expand without the environment: %v", err)
	}
}

func TestSettingsValidate(t *testing.T) {
	ok := Webhook{Name: "ops", URL: "https://hooks.example.com/cron"}
	for _, c := range []struct {
		s    Settings
		want string
	}{
		{Settings{Route: Route{Webhooks: []Webhook{ok}}}, ""},
		{Settings{Route: Route{Webhooks: []Webhook{{URL: ok.URL}}}}, "name is empty"},
		{Settings{Route: Route{Webhooks: []Webhook{ok, ok}}}, "given twice"},
		{Settings{Route: Route{Webhooks: []Webhook{{Name: "x", URL: "ftp://h/"}}}}, "http or https"},
		{Settings{Route: Route{Webhooks: []Webhook{{Name: "x", URL: ok.URL, Method: "GET"}}}}, "method"},
		{Settings{Route: Route{Webhooks: []Webhook{{Name: "x", URL: "https://${NOTIFY_UNSET_VAR_FOR_TEST}/"}}}}, ""},
		{Settings{Route: Route{Webhooks: []Webhook{{Name: "x", URL: ok.URL, Headers: map[string]string{"A": "Bearer ${TOK"}}}}}, "headers.A: \"${TOK\" does not start a ${NAME} reference"},
		{Settings{Route: Route{Webhooks: []Webhook{{Name: "x", URL: "https://h/${A-B}"}}}}, "url: \"${A-B}\" does not start"},
		{Settings{Route: Route{On: []string{"exploded"}}}, "unknown kind"},
		{Settings{Backoff: -1}, "backoff"},
		{Settings{MaxAttempts: -1}, "max_attempts"},
		{Settings{Backoff: time.Minute, MaxBackoff: time.Second}, "max_backoff 1s: must not be shorter than backoff 1m0s"},
		{Settings{MaxBackoff: DefaultBackoff / 2}, "max_backoff 500ms: must not be shorter than backoff, whose default is 1s"},
		{Settings{MaxBackoff: DefaultBackoff}, ""},
		{Settings{Backoff: time.Hour}, ""},
	} {
		err := c.s.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.s, err, c.want)
		}
	}
}

func TestRouteCheckEnv(t *testing.T) {
	r := Route{Webhooks: []Webhook{{Name: "ops", URL: "https://h/", Headers: map[string]string{"A": "${TOK}"}}}}
	if err := r.CheckEnv(func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), "webhook ops: environment variable TOK not set") {
		t.Fatalf("CheckEnv without TOK: %v", err)
	}
	if err := r.CheckEnv(func(string) (string, bool) { return "v", true }); err != nil {
		t.Fatalf("CheckEnv with TOK: %v", err)
	}
}

// The variables a route names are the secrets a child never inherits.
func TestRouteEnvRefs(t *testing.T) {
	r := Route{Webhooks: []Webhook{
		{Name: "a", URL: "https://h/${URL_TOK}", Headers: map[string]string{"X": "${HDR_TOK} ${URL_TOK}"}},
		{Name: "b", URL: "https://h/", Headers: map[string]string{"Y": "literal"}},
	}}
	if got := strings.Join(r.EnvRefs(), ","); got != "HDR_TOK,URL_TOK" {
		t.Errorf("EnvRefs = %q", got)
	}
}

func TestRouteSends(t *testing.T) {
	w := []Webhook{{Name: "ops", URL: "https://h.example/"}}
	if (Route{}).Sends(KindFailed) {
		t.Error("a route without webhooks sends")
	}
	if !(Route{Webhooks: w}).Sends(KindPaused) {
		t.Error("a route without on does not send every kind")
	}
	if (Route{Webhooks: w, On: []string{KindFailed}}).Sends(KindMissed) {
		t.Error("a route sends a kind it does not list")
	}
}
