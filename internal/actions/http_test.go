package actions

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

type recordedRequest struct {
	Method      string
	ContentType string
	Body        []byte
}

// recordingServer answers every request with status and records it.
func recordingServer(t *testing.T, status int, answer string) (*httptest.Server, <-chan recordedRequest) {
	t.Helper()
	reqs := make(chan recordedRequest, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server: read body: %v", err)
		}
		reqs <- recordedRequest{Method: r.Method, ContentType: r.Header.Get("Content-Type"), Body: b}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, reqs
}

func nextRequest(t *testing.T, reqs <-chan recordedRequest) recordedRequest {
	t.Helper()
	select {
	case r := <-reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("server got no request")
		return recordedRequest{}
	}
}

func TestHTTPActionBody(t *testing.T) {
	t.Parallel()
	srv, reqs := recordingServer(t, http.StatusOK, "ok")
	a := &HTTPAction{URL: srv.URL + "/hooks/warm", Client: srv.Client()}
	f := testFire()
	if err := a.Handle(context.Background(), f); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := nextRequest(t, reqs)
	if r.Method != http.MethodPost {
		t.Errorf("method = %s, want POST by default", r.Method)
	}
	if r.ContentType != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", r.ContentType)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("body %q: %v", r.Body, err)
	}
	want := map[string]string{
		"job_id":       `"daily_report"`,
		"scheduled_at": `"2024-03-10T09:00:00Z"`, // UTC, as in CRONSWAP_SCHEDULED_AT
		"run_id":       `"run-0123456789abcdef"`,
		"fence":        `42`,
		"instance_id":  `"replica-a"`,
		"args":         `{"region":"eu","n":3}`,
	}
	for k, v := range want {
		if got, ok := body[k]; !ok || string(got) != v {
			t.Errorf("body[%q] = %s, want %s", k, got, v)
		}
	}
	if len(body) != len(want) {
		t.Errorf("body has %d fields, want %d: %s", len(body), len(want), r.Body)
	}
	// The env and the body carry the same values.
	env := map[string]string{}
	for _, kv := range Env(context.Background(), f) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	var at string
	_ = json.Unmarshal(body["scheduled_at"], &at)
	if at != env["CRONSWAP_SCHEDULED_AT"] || string(body["args"]) != env["CRONSWAP_ARGS"] {
		t.Errorf("body scheduled_at %q / args %s differ from env %q / %s", at, body["args"], env["CRONSWAP_SCHEDULED_AT"], env["CRONSWAP_ARGS"])
	}
}

// A schedule without args reaches the runner as empty (non-nil) Args; the
// body must still be valid JSON, with args {} as in CRONSWAP_ARGS.
func TestHTTPActionNoArgs(t *testing.T) {
	t.Parallel()
	srv, reqs := recordingServer(t, http.StatusNoContent, "")
	for _, args := range []json.RawMessage{nil, {}, []byte("")} {
		f := testFire()
		f.Args = args
		if err := (&HTTPAction{URL: srv.URL, Client: srv.Client()}).Handle(context.Background(), f); err != nil {
			t.Fatalf("Args %#v: Run: %v", args, err)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(nextRequest(t, reqs).Body, &body); err != nil {
			t.Fatal(err)
		}
		if string(body["args"]) != "{}" {
			t.Errorf("Args %#v: body args = %s, want {}", args, body["args"])
		}
	}
}

func TestHTTPActionMethodAndDefaultClient(t *testing.T) {
	t.Parallel()
	srv, reqs := recordingServer(t, http.StatusAccepted, "")
	// Client nil: http.DefaultClient.
	if err := (&HTTPAction{URL: srv.URL, Method: http.MethodPut}).Handle(context.Background(), testFire()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := nextRequest(t, reqs)
	if r.Method != http.MethodPut || r.ContentType != "application/json" || len(r.Body) == 0 {
		t.Errorf("got %s %q body %q; want PUT application/json with a body", r.Method, r.ContentType, r.Body)
	}
}

func TestHTTPActionStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		ok     bool
	}{
		{200, true}, {201, true}, {204, true}, {299, true},
		{400, false}, {404, false}, {500, false}, {503, false},
	} {
		srv, _ := recordingServer(t, tc.status, "  boom: disk full\n")
		err := (&HTTPAction{URL: srv.URL, Client: srv.Client()}).Handle(context.Background(), testFire())
		if tc.ok {
			if err != nil {
				t.Errorf("status %d: err = %v, want success", tc.status, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("status %d: want an error", tc.status)
			continue
		}
		msg := err.Error()
		for _, want := range []string{strconv.Itoa(tc.status), "boom: disk full", "daily_report"} {
			if !strings.Contains(msg, want) {
				t.Errorf("status %d: error %q does not mention %q", tc.status, msg, want)
			}
		}
	}
}

func TestHTTPActionSlowServerTimesOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close

	const timeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := (&HTTPAction{URL: srv.URL, Client: srv.Client()}).Handle(ctx, testFire())
	took := time.Since(start)
	if err == nil {
		t.Fatal("want a timeout error")
	}
	select {
	case <-entered:
	default:
		t.Error("server never received the request")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want it to wrap context.DeadlineExceeded", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) || !ue.Timeout() {
		t.Errorf("err = %v, want a *url.Error with Timeout() true", err)
	}
	if took > timeout+5*time.Second {
		t.Errorf("Run took %v with a %v timeout", took, timeout)
	}
}

func TestHTTPActionUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	if err := (&HTTPAction{URL: u}).Handle(context.Background(), testFire()); err == nil {
		t.Fatal("closed server: want an error")
	}
	if err := (&HTTPAction{URL: "://bad"}).Handle(context.Background(), testFire()); err == nil {
		t.Fatal("bad URL: want an error")
	}
}
