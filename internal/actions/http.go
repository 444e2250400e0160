package actions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/cronswap/cronswap/jobs"
)

// HTTPConnsPerHost bounds the connections the http actions of a registry
// built from definitions keep open to one host, idle or busy: a burst of
// thousands of fires to one endpoint reuses connections instead of opening
// one per fire (and running out of file descriptors and ports); requests
// beyond it wait for a connection and show as lateness.
const HTTPConnsPerHost = 256

// NewHTTPClient returns the client the http actions of a registry share:
// the default transport's settings, with HTTPConnsPerHost connections per
// host kept open.
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no total bound; per host below
	t.MaxIdleConnsPerHost = HTTPConnsPerHost
	t.MaxConnsPerHost = HTTPConnsPerHost
	return &http.Client{Transport: t}
}

// HTTPAction sends the fire as a JSON body; a non-2xx answer is a failure.
type HTTPAction struct {
	URL    string
	Method string
	// Client sends the request; nil: http.DefaultClient. A registry built
	// from definitions gives all its http actions one NewHTTPClient.
	Client *http.Client
}

// Handle implements Action.
func (a *HTTPAction) Handle(ctx context.Context, f jobs.Run) error {
	// The same values as the exec environment: scheduled_at in UTC, args "{}"
	// when there are none (an empty non-nil RawMessage would not marshal).
	f.Slot = f.Slot.UTC()
	f.Args = argsJSON(f)
	body, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	method := a.Method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := a.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("http action %s: %s %s answered %s: %s", f.JobID, method, a.URL, resp.Status, bytes.TrimSpace(snippet))
	}
	return nil
}
