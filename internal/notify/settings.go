package notify

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cronswap/cronswap/internal/secret"
)

// Route says where the notices of a job go: the configuration's notify
// section globally, or a job's own notify section (jobs.<name>.notify),
// which replaces the global route for the schedules running that action.
type Route struct {
	// Webhooks are the sinks; an empty list sends nothing.
	Webhooks []Webhook `yaml:"webhooks"`
	// On lists the kinds sent (Kinds); empty means all of them.
	On []string `yaml:"on"`
}

// Sends reports whether r sends notices of kind.
func (r Route) Sends(kind string) bool {
	return len(r.Webhooks) > 0 && (len(r.On) == 0 || slices.Contains(r.On, kind))
}

// Webhook returns the webhook of r named name.
func (r Route) Webhook(name string) (Webhook, bool) {
	for _, w := range r.Webhooks {
		if w.Name == name {
			return w, true
		}
	}
	return Webhook{}, false
}

// Validate checks the route: webhooks valid with unique names, kinds known.
func (r Route) Validate() error {
	seen := map[string]bool{}
	for i, w := range r.Webhooks {
		if err := w.Validate(); err != nil {
			return fmt.Errorf("webhooks[%d]: %w", i, err)
		}
		if seen[w.Name] {
			return fmt.Errorf("webhooks[%d]: name %q given twice", i, w.Name)
		}
		seen[w.Name] = true
	}
	for _, k := range r.On {
		if !slices.Contains(Kinds, k) {
			return fmt.Errorf("on: unknown kind %q (known: %s)", k, strings.Join(Kinds, ", "))
		}
	}
	return nil
}

// Webhook is a sink that receives each notification as a JSON body.
// URL and header values may name environment variables as ${NAME}, read
// when the notification is sent (so secrets need not be in the file).
type Webhook struct {
	// Name identifies the sink in notification ids and records; unique
	// within a route.
	Name string `yaml:"name"`
	// URL is an absolute http or https URL.
	URL string `yaml:"url"`
	// Method is POST (default), PUT or PATCH.
	Method string `yaml:"method"`
	// Headers are sent with every request.
	Headers map[string]string `yaml:"headers"`
}

// WebhookMethods are the methods a webhook may use.
var WebhookMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch}

// Validate checks the webhook: a name, an http(s) URL with a host, a
// known method. The environment variables it names are not read (the
// command line loads the same file without them): CheckEnv does.
func (w Webhook) Validate() error {
	if strings.TrimSpace(w.Name) == "" {
		return errors.New("name is empty: give each webhook a name (it is part of the notification ids)")
	}
	if strings.ContainsAny(w.Name, "/ ") {
		return fmt.Errorf("name %q: no slashes or spaces", w.Name)
	}
	if w.Method != "" && !slices.Contains(WebhookMethods, strings.ToUpper(w.Method)) {
		return fmt.Errorf("webhook %s: method %q: want one of %s", w.Name, w.Method, strings.Join(WebhookMethods, ", "))
	}
	if err := secret.CheckSyntax(w.URL); err != nil {
		return fmt.Errorf("webhook %s: url: %w", w.Name, err)
	}
	for k, v := range w.Headers {
		if err := secret.CheckSyntax(v); err != nil {
			return fmt.Errorf("webhook %s: headers.%s: %w", w.Name, k, err)
		}
	}
	raw, _, _ := w.Expand(func(string) (string, bool) { return "x", true })
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook %s: url: %w", w.Name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook %s: url %q: want an absolute http or https URL (e.g. https://hooks.example.com/cron)", w.Name, w.URL)
	}
	return nil
}

// CheckEnv reports the environment variables the route's webhooks name
// that lookup (os.LookupEnv) does not know; the daemon refuses to start
// without them.
func (r Route) CheckEnv(lookup func(string) (string, bool)) error {
	for _, w := range r.Webhooks {
		if _, _, err := w.Expand(lookup); err != nil {
			return fmt.Errorf("webhook %s: %w", w.Name, err)
		}
	}
	return nil
}

// Expand returns the URL and headers with every ${NAME} replaced by
// lookup(NAME) (the rule of package secret); a name lookup does not know
// is an error naming it.
func (w Webhook) Expand(lookup func(string) (string, bool)) (string, map[string]string, error) {
	x := secret.NewExpander(lookup)
	u := x.Expand(w.URL)
	h := make(map[string]string, len(w.Headers))
	for k, v := range w.Headers {
		h[k] = x.Expand(v)
	}
	if err := x.Err(); err != nil {
		return "", nil, err
	}
	return u, h, nil
}

// EnvRefs returns the environment variables the route's webhooks name
// (${NAME} in a URL or header value), sorted: secrets the daemon holds,
// which a program it starts does not inherit.
func (r Route) EnvRefs() []string {
	var names []string
	for _, w := range r.Webhooks {
		names = append(names, secret.Refs(w.URL)...)
		for _, v := range w.Headers {
			names = append(names, secret.Refs(v)...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Settings is the notify section of the configuration: the global route
// and the relay's timing. Durations left 0 take the Default values.
type Settings struct {
	Route `yaml:",inline"`
	// Backoff is the wait after a delivery's first failure, doubled after
	// each further one up to MaxBackoff (which, 0, is DefaultMaxBackoff or
	// Backoff when longer).
	Backoff    time.Duration `yaml:"backoff"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// MaxAttempts is how many deliveries of a notification are tried
	// before it is given up (status failed).
	MaxAttempts int `yaml:"max_attempts"`
	// Timeout bounds one request to a sink.
	Timeout time.Duration `yaml:"timeout"`
	// Poll is the period of the relay's look for notices and due
	// notifications written or left by other replicas (its own it handles
	// at once).
	Poll time.Duration `yaml:"poll"`
	// MaxAge is the age past which a notice still in the outbox is
	// cleared without being sent (notices written while no relay ran,
	// e.g. before notify was configured, are not sent days late).
	MaxAge time.Duration `yaml:"max_age"`
}

// Defaults of Settings.
const (
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = 10 * time.Minute
	DefaultMaxAttempts = 20
	DefaultTimeout     = 10 * time.Second
	DefaultPoll        = time.Minute
	DefaultMaxAge      = 24 * time.Hour
)

// Validate checks the section: durations not negative, a MaxBackoff
// given not shorter than the backoff (given or default).
func (s Settings) Validate() error {
	if err := s.Route.Validate(); err != nil {
		return err
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"backoff", s.Backoff}, {"max_backoff", s.MaxBackoff}, {"timeout", s.Timeout}, {"poll", s.Poll}, {"max_age", s.MaxAge}} {
		if d.v < 0 {
			return fmt.Errorf("%s %s: must be positive (or 0 for the default)", d.key, d.v)
		}
	}
	if s.MaxBackoff > 0 {
		switch {
		case s.Backoff > 0 && s.MaxBackoff < s.Backoff:
			return fmt.Errorf("max_backoff %s: must not be shorter than backoff %s", s.MaxBackoff, s.Backoff)
		case s.Backoff == 0 && s.MaxBackoff < DefaultBackoff:
			return fmt.Errorf("max_backoff %s: must not be shorter than backoff, whose default is %s (set backoff too)", s.MaxBackoff, DefaultBackoff)
		}
	}
	if s.MaxAttempts < 0 {
		return fmt.Errorf("max_attempts %d: must be positive (or 0 for the default %d)", s.MaxAttempts, DefaultMaxAttempts)
	}
	return nil
}
