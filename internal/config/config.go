// Package config loads cronswap's YAML configuration file, applies defaults
// and environment overrides, and validates it.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// Environment variables that override the file.
const (
	EnvConfig     = "CRONSWAP_CONFIG"
	EnvMongoURI   = "CRONSWAP_MONGO_URI"
	EnvInstanceID = "CRONSWAP_INSTANCE_ID"
	// EnvWriteMongoURI overrides http.write_mongo_uri.
	EnvWriteMongoURI = "CRONSWAP_HTTP_WRITE_MONGO_URI"
)

// DefaultMongoURI is used when neither the file, the environment nor a flag
// names a server: the local launcher's default port.
const DefaultMongoURI = "mongodb://127.0.0.1:27017/"

// Defaults of the keys this package owns (fill applies them).
const (
	// DefaultDatabase is mongo.database's default.
	DefaultDatabase = "cronswap"
	// DefaultTimezone is timezone's default.
	DefaultTimezone = "UTC"
	// DefaultHTTPListen is http.listen's default: loopback only.
	DefaultHTTPListen = "127.0.0.1:9090"
)

// Config is the whole configuration of one daemon instance.
type Config struct {
	Mongo      Mongo    `yaml:"mongo"`
	InstanceID string   `yaml:"instance_id"`
	Timezone   string   `yaml:"timezone"`
	Watch      Watch    `yaml:"watch"`
	Lock       Lock     `yaml:"lock"`
	Runs       Runs     `yaml:"runs"`
	HTTP       HTTP     `yaml:"http"`
	Shutdown   Shutdown `yaml:"shutdown"`
	// Workers bounds how many actions run at once in this instance, all
	// categories together; 0 (the default) is no bound. Fires over the
	// bound wait for admission (see QueueLimit).
	Workers int `yaml:"workers"`
	// Categories bounds the actions running at once per schedule category
	// (the schedule's category field): categories: {billing: {max_running:
	// 5}}. A category not listed has no bound of its own. See MaxRunning.
	Categories map[string]Category `yaml:"categories"`
	// Catchup is the default catch-up window: after downtime, a job's most
	// recent missed slot younger than this runs once. 0 (default) is off.
	Catchup time.Duration `yaml:"catchup"`
	// StartingDeadline is the starting deadline of the actions without
	// their own (jobs.<name>.starting_deadline): how long after its slot
	// (plus jitter) a fire may still start; later it is not run and is
	// recorded missed. 0 means the time to the job's next slot, at most
	// firepath.MaxDefaultStartingDeadline.
	StartingDeadline time.Duration `yaml:"starting_deadline"`
	// QueueLimit bounds the fires waiting for admission (held back by a
	// category's max_running or by workers); 0 means
	// firepath.DefaultQueueLimit.
	QueueLimit int `yaml:"queue_limit"`
	// StateFile, when set, is where the applied schedule state and its
	// resume token are persisted for a warm restart.
	StateFile string `yaml:"state_file"`
	// DivideSchedules makes the replicas divide the schedules: each arms
	// only the jobs it owns and those it would own next (see
	// daemon.Options.DivideSchedules); false (the default) arms every job
	// on every replica.
	DivideSchedules bool `yaml:"divide_schedules"`
	// Members times the membership: how soon a dead replica is seen gone
	// and how long a replica that does not own a job waits before claiming
	// its fire (docs/members.md).
	Members Members `yaml:"members"`
	// Notify configures failure notifications (package notify): the
	// global sinks and the relay's timing. A job's own notify section
	// (jobs.<name>.notify) replaces the global sinks for that action.
	Notify notify.Settings `yaml:"notify"`
	// Jobs are the named actions schedules may run, each decoded straight
	// into the fire path's definition type.
	Jobs     map[string]actions.Definition `yaml:"jobs"`
	Location *time.Location                `yaml:"-"`
}

// Category configures one schedule category.
type Category struct {
	// MaxRunning is the most actions of the category running at once in
	// this instance; at least 1. Fires over it wait for admission, other
	// categories' fires are not held back by it.
	MaxRunning int `yaml:"max_running"`
}

// MaxRunning returns the max_running bound of every configured category
// (category name -> bound), the form the fire path's admission gate takes
// (jobs.NewGate); nil when no category is configured.
func (c *Config) MaxRunning() map[string]int {
	if len(c.Categories) == 0 {
		return nil
	}
	m := make(map[string]int, len(c.Categories))
	for name, cat := range c.Categories {
		m[name] = cat.MaxRunning
	}
	return m
}

// Mongo says where the schedules live.
type Mongo struct {
	URI      string `yaml:"uri"`
	Database string `yaml:"database"`
}

// Watch configures how edits are noticed. A key left out (nil, or an empty
// mode) takes the watcher's default: see the Default constants of package
// changestream. Finish parses the mode, so it is never empty afterwards.
type Watch struct {
	// Mode is auto (default), changestream or poll.
	Mode changestream.Mode `yaml:"mode"`
	// PollInterval is the full-diff period in poll mode; must be positive.
	PollInterval *time.Duration `yaml:"poll_interval"`
	// ResyncInterval is the period of the safety-net full diff while
	// streaming; 0 disables it.
	ResyncInterval *time.Duration `yaml:"resync_interval"`
	// BackoffMin and BackoffMax bound the reconnect backoff: 0 < min <= max,
	// where a key left out counts as its default.
	BackoffMin *time.Duration `yaml:"backoff_min"`
	BackoffMax *time.Duration `yaml:"backoff_max"`
}

// Apply returns o with the settings of this section: the mode and every
// duration given. The rest of o is left as it is, so the watcher's defaults
// apply to the keys left out.
func (w Watch) Apply(o changestream.Options) changestream.Options {
	o.Mode = w.Mode
	if w.PollInterval != nil {
		o.PollInterval = *w.PollInterval
	}
	if w.ResyncInterval != nil {
		o.ResyncInterval = *w.ResyncInterval
		if o.ResyncInterval == 0 {
			o.ResyncInterval = changestream.ResyncOff
		}
	}
	if w.BackoffMin != nil {
		o.BackoffMin = *w.BackoffMin
	}
	if w.BackoffMax != nil {
		o.BackoffMax = *w.BackoffMax
	}
	return o
}

// validate parses the mode and checks the durations given.
func (w *Watch) validate() error {
	mode, err := changestream.ParseMode(string(w.Mode))
	if err != nil {
		return fmt.Errorf("watch.mode: %w", err)
	}
	w.Mode = mode
	if w.PollInterval != nil && *w.PollInterval <= 0 {
		return fmt.Errorf("watch.poll_interval %s: must be positive", *w.PollInterval)
	}
	if w.ResyncInterval != nil && *w.ResyncInterval < 0 {
		return fmt.Errorf("watch.resync_interval %s: must be 0 (off) or positive", *w.ResyncInterval)
	}
	lo, hi := changestream.DefaultBackoffMin, changestream.DefaultBackoffMax
	if w.BackoffMin != nil {
		lo = *w.BackoffMin
	}
	if w.BackoffMax != nil {
		hi = *w.BackoffMax
	}
	if lo <= 0 || hi < lo {
		return fmt.Errorf("watch.backoff_min %s / backoff_max %s: want 0 < min <= max", lo, hi)
	}
	return nil
}

// Lock configures the per-job leader locks.
type Lock struct {
	// TTL is the lock lease; 0 means firepath.DefaultLockTTL. Anything
	// else below firepath.MinLockTTL is refused.
	TTL time.Duration `yaml:"ttl"`
}

// Members configures the membership's timing; zero fields take the
// defaults (members.DefaultHeartbeat, members.DefaultLease,
// firepath.DefaultClaimGrace).
type Members struct {
	// Heartbeat is the period of the member document's heartbeat write and
	// of the read of the live members; at least MinHeartbeat.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// Lease is how long a member stays live after its last heartbeat: a
	// dead replica is seen gone that long after its last heartbeat. At
	// least twice the heartbeat.
	Lease time.Duration `yaml:"lease"`
	// ClaimGrace is how long a replica that does not own a job waits
	// after its fire was due before claiming it (the owner claims at
	// once).
	ClaimGrace time.Duration `yaml:"claim_grace"`
}

// MinHeartbeat is the shortest members.heartbeat: each heartbeat is a
// write and a read, each bounded by the period.
const MinHeartbeat = time.Second

// validate checks the members section against the defaults it fills in.
func (m Members) validate() error {
	if m.Heartbeat < 0 || (m.Heartbeat > 0 && m.Heartbeat < MinHeartbeat) {
		return fmt.Errorf("members.heartbeat %s: must be at least %s (or 0 for the default %s)", m.Heartbeat, MinHeartbeat, members.DefaultHeartbeat)
	}
	hb, lease := m.Heartbeat, m.Lease
	if hb == 0 {
		hb = members.DefaultHeartbeat
	}
	if lease < 0 || (lease > 0 && lease < 2*hb) {
		return fmt.Errorf("members.lease %s: must be at least twice members.heartbeat (%s), so that one failed heartbeat does not drop a live replica (or 0 for the default %s)",
			m.Lease, hb, members.DefaultLease)
	}
	if lease == 0 && members.DefaultLease < 2*hb {
		return fmt.Errorf("members.heartbeat %s: the default members.lease %s is less than twice it; set members.lease too", hb, members.DefaultLease)
	}
	if m.ClaimGrace < 0 {
		return fmt.Errorf("members.claim_grace %s: must be positive (or 0 for the default %s)", m.ClaimGrace, firepath.DefaultClaimGrace)
	}
	return nil
}

// Runs configures the run records.
type Runs struct {
	// Retention is how long run records are kept after they end; 0 means
	// record.DefaultRetention.
	Retention time.Duration `yaml:"retention"`
}

// HTTP configures the status and metrics listener.
type HTTP struct {
	Listen string `yaml:"listen"`
	// Pprof serves the Go runtime's profiles (net/http/pprof) under
	// /debug/pprof/ on the listener; off by default, and refused unless
	// Listen is a loopback address (profiles show the process's memory).
	Pprof bool `yaml:"pprof"`
	// TokensFile names a file of named tokens with their roles, viewer or
	// operator (httpapi.LoadTokens); "" for none. CRONSWAP_HTTP_TOKEN
	// stays an operator's token beside them.
	TokensFile string `yaml:"tokens_file"`
	// WriteMongoURI is the connection the status page's actions write
	// through, with credentials of their own (the operators' rights, not
	// the daemon's); "" (the default) leaves the page read-only. The
	// database is mongo.database.
	WriteMongoURI string `yaml:"write_mongo_uri"`
}

// validate checks the listener's address, and that pprof is only served
// on a loopback listener. An empty http.listen is refused rather than
// given to the listener, which would bind every interface on a random
// port: it has no meaning of its own (the listener cannot be turned off),
// and an operator who wrote it most likely meant something else.
func (h HTTP) validate() error {
	if h.Listen == "" {
		return fmt.Errorf("http.listen is empty: give host:port, e.g. %s (the default, when the key is left out)", DefaultHTTPListen)
	}
	if _, _, err := net.SplitHostPort(h.Listen); err != nil {
		return fmt.Errorf("http.listen %q: %w (want host:port, e.g. %s)", h.Listen, err, DefaultHTTPListen)
	}
	if h.Pprof && !IsLoopback(h.Listen) {
		return fmt.Errorf("http.pprof: served only on a loopback listener, and http.listen is %q (e.g. listen: 127.0.0.1:9090)", h.Listen)
	}
	return nil
}

// IsLoopback reports whether addr (host:port of a listener) is a loopback
// address only: "localhost", 127.0.0.0/8 or ::1. An empty host (all
// interfaces) is not. It decides where the profiles may be served and
// when the daemon warns that no token protects its listener.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Shutdown configures graceful termination.
type Shutdown struct {
	// Grace is how long SIGTERM waits for running actions before cancelling them.
	Grace time.Duration `yaml:"grace"`
}

// Default returns the configuration used when no file is given (Finish
// derives Location from it). The settings whose defaults other packages own
// are left zero for them to fill in: the watch section (changestream),
// lock.ttl, starting_deadline, queue_limit and members.claim_grace
// (internal/firepath), runs.retention (internal/record), members.heartbeat
// and lease (internal/members), notify.* (internal/notify).
func Default() Config {
	c := Config{
		HTTP:     HTTP{Listen: DefaultHTTPListen},
		Shutdown: Shutdown{Grace: firepath.DefaultShutdownGrace},
	}
	c.fill()
	return c
}

// fill gives mongo.uri, mongo.database and timezone their defaults when
// they are empty: absent from the file, or given as "". It is the one place
// these defaults are applied (Default and Finish call it).
func (c *Config) fill() {
	if c.Mongo.URI == "" {
		c.Mongo.URI = DefaultMongoURI
	}
	if c.Mongo.Database == "" {
		c.Mongo.Database = DefaultDatabase
	}
	if c.Timezone == "" {
		c.Timezone = DefaultTimezone
	}
}

// CatchupFor returns the catch-up window of job name (its own, else the
// default).
func (c *Config) CatchupFor(name string) time.Duration {
	if j, ok := c.Jobs[name]; ok && j.Catchup != nil {
		return *j.Catchup
	}
	return c.Catchup
}

// Load reads the file at path (none when path is empty), applies the
// environment overrides and validates the result.
func Load(path string) (Config, error) {
	cfg := Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("read config: %w", err)
		}
		if err := decode(data, &cfg); err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if v := os.Getenv(EnvMongoURI); v != "" {
		cfg.Mongo.URI = v
	}
	if v := os.Getenv(EnvInstanceID); v != "" {
		cfg.InstanceID = v
	}
	if v := os.Getenv(EnvWriteMongoURI); v != "" {
		cfg.HTTP.WriteMongoURI = v
	}
	if err := cfg.Finish(); err != nil {
		if path != "" {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
		return cfg, err
	}
	return cfg, nil
}

// Parse reads a configuration from YAML text over the defaults, without the
// environment, and validates it.
func Parse(text string) (Config, error) {
	cfg := Default()
	if err := decode([]byte(text), &cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.Finish()
}

// decode reads YAML text over cfg, refusing unknown keys and the bare
// numbers other than 0 given for a duration. Empty documents
// are skipped; a second document with content is refused rather than
// silently ignored (yaml's Decoder reads only the first).
func decode(data []byte, cfg *Config) error {
	docs := yaml.NewDecoder(bytes.NewReader(data))
	seen := false
	for {
		var doc yaml.Node
		err := docs.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
			continue
		}
		if seen {
			return fmt.Errorf("line %d: a second YAML document (after \"---\"); keep the configuration in one document", doc.Content[0].Line)
		}
		seen = true
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	for {
		// Empty documents decode as no-ops; at most one has content. A
		// bare 0 for a duration is read as 0s (document).
		if err := dec.Decode(&document{cfg}); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// Finish fills derived defaults (instance id, location) and validates.
// Call it again after changing fields by hand (flags).
func (c *Config) Finish() error {
	c.fill()
	if c.InstanceID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return errors.New("instance_id is empty and the hostname is unknown: set instance_id or CRONSWAP_INSTANCE_ID")
		}
		c.InstanceID = host
	}
	loc, err := schedule.LoadLocation(c.Timezone)
	if err != nil {
		return fmt.Errorf("timezone: %w", err)
	}
	c.Location = loc
	if err := c.Watch.validate(); err != nil {
		return err
	}
	if err := c.HTTP.validate(); err != nil {
		return err
	}
	if err := c.Members.validate(); err != nil {
		return err
	}
	if c.Lock.TTL < 0 || (c.Lock.TTL > 0 && c.Lock.TTL < firepath.MinLockTTL) {
		return fmt.Errorf("lock.ttl %s: must be at least %s, the lease being renewed every ttl/3 while a run lasts (e.g. lock: {ttl: 1m}; 0 or absent is the default %s)",
			c.Lock.TTL, firepath.MinLockTTL, firepath.DefaultLockTTL)
	}
	if c.Runs.Retention < 0 {
		return fmt.Errorf("runs.retention %s: must be positive (or 0 for the default %s)", c.Runs.Retention, record.DefaultRetention)
	}
	if c.Workers < 0 {
		return fmt.Errorf("workers %d: must be positive, the most actions running at once on this replica (or 0, the default: no bound)", c.Workers)
	}
	if err := validateCategories(c.Categories); err != nil {
		return err
	}
	if c.Catchup < 0 {
		return fmt.Errorf("catchup %s: must be 0 (off) or positive", c.Catchup)
	}
	if c.StartingDeadline < 0 {
		return fmt.Errorf("starting_deadline %s: must be positive (or 0 for the default: the time to the job's next slot, at most %s)",
			c.StartingDeadline, firepath.MaxDefaultStartingDeadline)
	}
	if c.QueueLimit < 0 {
		return fmt.Errorf("queue_limit %d: must be positive, the most fires waiting for admission (or 0 for the default %d)", c.QueueLimit, firepath.DefaultQueueLimit)
	}
	if err := c.Notify.Validate(); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if c.Shutdown.Grace < 0 {
		return fmt.Errorf("shutdown.grace %s: must not be negative", c.Shutdown.Grace)
	}
	names := make([]string, 0, len(c.Jobs))
	for name := range c.Jobs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		// Each action kind checks its own settings (jobs.Definition), so a
		// bad action is refused here, at load time, not at its first fire.
		d := c.Jobs[name]
		if err := d.Validate(); err != nil {
			return fmt.Errorf("jobs.%s: %w", name, err)
		}
		if d.Notify != nil {
			if err := d.Notify.Validate(); err != nil {
				return fmt.Errorf("jobs.%s.notify: %w", name, err)
			}
		}
		if err := c.checkAction(d); err != nil {
			return fmt.Errorf("jobs.%s: %w", name, err)
		}
		// Show the effective policy (the empty one is the default).
		overlap, _ := jobs.ParseOverlap(string(d.Overlap))
		d.Overlap = overlap
		c.Jobs[name] = d
	}
	return nil
}

// CheckStateFile reports a state_file whose directory does not exist. It
// is a check of the daemon's machine, made when the daemon starts: the
// other commands load the same file where that directory need not exist.
func (c *Config) CheckStateFile() error {
	if c.StateFile == "" {
		return nil
	}
	dir := filepath.Dir(c.StateFile)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("state_file %s: its directory %s must exist (the file is written there atomically)", c.StateFile, dir)
	}
	return nil
}

// validateCategories checks the categories section: names non-empty,
// max_running at least 1.
func validateCategories(cats map[string]Category) error {
	names := make([]string, 0, len(cats))
	for name := range cats {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.TrimSpace(name) == "" {
			return fmt.Errorf("categories: a category name is empty or blank (%q); name the category exactly as the schedules' category field does", name)
		}
		if n := cats[name].MaxRunning; n < 1 {
			return fmt.Errorf("categories.%s.max_running %d: must be at least 1, the most actions of category %s running at once on this replica (leave the category out for no bound)",
				name, n, name)
		}
	}
	return nil
}

// RedactURI hides the password of a MongoDB connection string, so it can be
// logged or shown. It never fails and never returns the password: everything
// between the first ':' after "://" and the last '@' is masked.
//
// In a valid URI the credentials percent-encode '@', ':', '/' and '?', and
// the hosts never hold an '@', so the last '@' before the first '/' or '?'
// ends them. Raw (unencoded) passwords hold any of these, so the credentials
// are taken to end at the last '@' of all: an '@' in the options
// (appName=me@corp) after a host:port then hides the hosts too, the price of
// never showing a raw password.
func RedactURI(uri string) string {
	prefix, user, _, host, ok := splitURICredentials(uri)
	if !ok {
		return uri
	}
	return prefix + user + ":xxxxx" + host
}

// URIPassword returns the password of a MongoDB connection string, the
// part RedactURI masks; "" when it has none. The daemon redacts it from
// what runs capture.
func URIPassword(uri string) string {
	_, _, pass, _, _ := splitURICredentials(uri)
	return pass
}

// splitURICredentials splits uri around its password (RedactURI's rule):
// prefix ("scheme://"), user, password, and the rest from the '@' on; ok
// is false when it has no password.
func splitURICredentials(uri string) (prefix, user, pass, rest string, ok bool) {
	body := uri
	if scheme, after, found := strings.Cut(uri, "://"); found {
		prefix, body = scheme+"://", after
	}
	at := strings.LastIndexByte(body, '@')
	if at < 0 {
		return "", "", "", "", false
	}
	user, pass, ok = strings.Cut(body[:at], ":")
	if !ok {
		return "", "", "", "", false
	}
	return prefix, user, pass, body[at:], true
}
