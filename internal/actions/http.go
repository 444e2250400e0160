package actions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cronswap/cronswap/internal/secret"
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
// host kept open. An action with TLS settings gets a clone of its
// transport with them (Start).
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no total bound; per host below
	t.MaxIdleConnsPerHost = HTTPConnsPerHost
	t.MaxConnsPerHost = HTTPConnsPerHost
	return &http.Client{Transport: t}
}

// drainBytes is how much of an answer's body beyond what is kept is read
// and dropped, so that the connection can be reused.
const drainBytes = 64 << 10

// HTTPAction sends a request for each fire: the fire as a JSON body (or the
// args alone), the configured headers and authorization, and the daemon's
// headers (runFields). An answer whose status is not a success is a
// failure. The answer's status and the first bytes of its body are the
// run's Output, with every known secret redacted.
type HTTPAction struct {
	URL    string
	Method string
	// Headers are sent with every request, ${NAME} in a value read from
	// the daemon's environment (LookupEnv) at each fire.
	Headers map[string]string
	// Bearer or BasicAuth (at most one) make the Authorization header,
	// read at each fire.
	Bearer    *SecretSource
	BasicAuth *BasicAuth
	// ArgsBody sends the schedule's args alone ({} when none) instead of
	// the fire.
	ArgsBody bool
	// Success lists the statuses that are a success; empty: 200-299.
	Success []StatusRange
	// NoRedirects makes a 3xx answer the answer instead of following it.
	NoRedirects bool
	// AnswerBytes is how many bytes of the answer's body are kept (the
	// first ones); default DefaultTailBytes.
	AnswerBytes int
	// Client sends the request; nil: http.DefaultClient. A registry built
	// from definitions gives all its http actions one NewHTTPClient (or a
	// clone with their TLS settings). Its CheckRedirect is replaced.
	Client *http.Client
	// LookupEnv reads the daemon's environment; nil: os.LookupEnv.
	LookupEnv secret.Lookup
	// Secrets redacts known secret values from the answer and the error;
	// the values this action reads are added to it. nil: none.
	Secrets *secret.Redactor
}

// The runner records the answer of every run.
var _ OutputHandler = (*HTTPAction)(nil)

// Handle implements jobs.Handler: HandleOutput without the output.
func (a *HTTPAction) Handle(ctx context.Context, f jobs.Run) error {
	_, err := a.HandleOutput(ctx, f)
	return err
}

// HandleOutput implements OutputHandler.
func (a *HTTPAction) HandleOutput(ctx context.Context, f jobs.Run) (Output, error) {
	method := a.Method
	if method == "" {
		method = http.MethodPost
	}
	body, err := a.body(f)
	if err != nil {
		return Output{}, fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL, bytes.NewReader(body))
	if err != nil {
		return Output{}, fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	hidden, err := a.setHeaders(req.Header)
	if err != nil {
		return Output{}, fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	setRunHeaders(ctx, req.Header, f)
	client := http.DefaultClient
	if a.Client != nil {
		client = a.Client
	}
	c := *client
	c.CheckRedirect = a.checkRedirect(hidden)
	resp, err := c.Do(req)
	if err != nil {
		return Output{}, fmt.Errorf("http action %s: %w", f.JobID, err)
	}
	defer resp.Body.Close()
	out := Output{AnswerStatus: resp.StatusCode, Answer: a.readAnswer(resp.Body)}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
	if !a.succeeded(resp.StatusCode) {
		snippet := out.Answer
		if len(snippet) > 1024 {
			snippet = strings.ToValidUTF8(snippet[:1024], "")
		}
		return out, fmt.Errorf("http action %s: %s %s answered %s: %s", f.JobID, method, req.URL.Redacted(), resp.Status, snippet)
	}
	return out, nil
}

// body returns the request's body: the fire (scheduled_at in UTC, args
// "{}" when none: the same values as the exec environment), or its args.
func (a *HTTPAction) body(f jobs.Run) ([]byte, error) {
	f.Slot = f.Slot.UTC()
	f.Args = argsJSON(f) // an empty non-nil RawMessage would not marshal
	if a.ArgsBody {
		return f.Args, nil
	}
	return json.Marshal(f)
}

// setHeaders sets the content type, the configured headers and the
// authorization on h, reading their secrets now, and returns the names of
// the headers that carry one (dropped on a redirect to another host).
func (a *HTTPAction) setHeaders(h http.Header) ([]string, error) {
	lookup := a.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	h.Set("Content-Type", "application/json")
	x := secret.NewExpander(lookup)
	var hidden []string
	for k, v := range a.Headers {
		value := x.Expand(v)
		if len(secret.Refs(v)) > 0 {
			hidden = append(hidden, k)
		}
		if err := checkHeaderValue(value); err != nil {
			return nil, fmt.Errorf("http.headers.%s: %w", k, err)
		}
		h.Set(k, value)
	}
	if err := x.Err(); err != nil {
		return nil, fmt.Errorf("http.headers: %w", err)
	}
	a.Secrets.Add(x.Values()...)
	auth, values, err := authorization(a.Bearer, a.BasicAuth, lookup)
	if err != nil {
		return nil, err
	}
	a.Secrets.Add(values...)
	if auth != "" {
		h.Set("Authorization", auth)
		hidden = append(hidden, "Authorization")
	}
	return hidden, nil
}

// checkRedirect is the client's redirect policy: none with NoRedirects,
// else at most MaxRedirects, and the headers that carry a secret (hidden)
// are not sent on to another host or over plain http.
func (a *HTTPAction) checkRedirect(hidden []string) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if a.NoRedirects {
			return http.ErrUseLastResponse
		}
		if len(via) >= MaxRedirects {
			return fmt.Errorf("stopped after %d redirects", MaxRedirects)
		}
		if first := via[0].URL; !sameOrigin(first, req.URL) {
			for _, k := range hidden {
				req.Header.Del(k)
			}
		}
		return nil
	}
}

// sameOrigin reports whether a redirect from first to next stays on the
// host (and port) and does not leave https.
func sameOrigin(first, next *url.URL) bool {
	return strings.EqualFold(first.Host, next.Host) && (!strings.EqualFold(first.Scheme, "https") || strings.EqualFold(next.Scheme, "https"))
}

// succeeded reports whether status is a success: in one of the Success
// ranges, or 2xx without them.
func (a *HTTPAction) succeeded(status int) bool {
	if len(a.Success) == 0 {
		return status >= 200 && status <= 299
	}
	return slices.ContainsFunc(a.Success, func(r StatusRange) bool { return r.Lo <= status && status <= r.Hi })
}

// readAnswer returns the first AnswerBytes of body with every known secret
// redacted (reading as many bytes more as the longest secret, so that one
// across the cut is not kept in part), as valid UTF-8 trimmed of
// surrounding space.
func (a *HTTPAction) readAnswer(body io.Reader) string {
	n := a.AnswerBytes
	if n <= 0 {
		n = DefaultTailBytes
	}
	b, _ := io.ReadAll(io.LimitReader(body, int64(n+a.Secrets.Longest())))
	text := a.Secrets.Redact(string(b))
	if len(text) > n {
		text = text[:n]
		// Drop a character the cut split (at most UTFMax-1 bytes of it).
		for range utf8.UTFMax - 1 {
			if r, size := utf8.DecodeLastRuneInString(text); r != utf8.RuneError || size != 1 {
				break
			}
			text = text[:len(text)-1]
		}
	}
	return strings.TrimSpace(strings.ToValidUTF8(text, "\uFFFD"))
}
