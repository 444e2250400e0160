// Package testmongo gives tests a MongoDB to talk to.
//
// When CRONSWAP_MONGO_URI (or MONGODB_URI) is set, that server is used as it is: point it at a real replica set
// and the same tests run unchanged. Otherwise Start launches the project's test server,
// scripts/mongo-server/target/mongo-server.jar (mongo-java-server with an oplog and change streams, reporting
// MongoDB 6.0 / wire version 17), on a loopback port, and stops it when asked, when the test binary exits or when
// it dies (stdin EOF, process group kill, and PR_SET_PDEATHSIG on Linux). Build the jar with
// `scripts/mongo.sh build`.
//
// Typical use:
//
//	func TestMain(m *testing.M) { testmongo.Main(m, nil) }
//
//	func TestSomething(t *testing.T) {
//		client := testmongo.Client(t)
//		db := testmongo.NewDatabase(t, client)
//		...
//	}
package testmongo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/childproc"
	"github.com/cronswap/cronswap/internal/faultproxy"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// EnvURI and EnvURIFallback name the environment variables that select an external server instead of launching one.
const (
	EnvURI         = "CRONSWAP_MONGO_URI"
	EnvURIFallback = "MONGODB_URI"
	// EnvLog, when set to a non-empty value other than "0", copies the launched server's stderr to os.Stderr.
	EnvLog = "CRONSWAP_MONGO_LOG"
	// EnvJar overrides the path of mongo-server.jar.
	EnvJar = "CRONSWAP_MONGO_JAR"
)

// JarRelPath is where `scripts/mongo.sh build` puts the server, relative to the repository root.
const JarRelPath = "scripts/mongo-server/target/mongo-server.jar"

// ErrExternal is returned by the process controls of a Server that testmongo did not launch.
var ErrExternal = errors.New("testmongo: server is external (" + EnvURI + "), it cannot be stopped or restarted")

// Options configure a launched server. They are ignored when an external URI is set in the environment.
type Options struct {
	// Port to listen on (127.0.0.1); 0 picks a free port. Restart keeps the port of the first start.
	Port int
	// H2File makes the server keep its data and oplog in this MVStore file, so they survive Restart (the oplog
	// then has the launcher's default bound, scripts/mongo-server/README.md; ExtraArgs may set
	// --oplog-max-entries). Empty: in memory (Restart then starts empty, and old resume tokens get
	// ChangeStreamHistoryLost).
	H2File string
	// Raw runs mongo-java-server without the launcher's compatibility layer (library event shapes, no
	// postBatchResumeToken, no awaitData, findAndModify invisible to change streams). For comparisons only.
	Raw bool
	// StartTimeout bounds the wait for the server to listen; default 60s.
	StartTimeout time.Duration
	// Stderr receives the server's log (WARN level). Default: discarded, unless EnvLog is set.
	Stderr io.Writer
	// ExtraArgs are appended to the launcher's command line (e.g. "--log-level", "info").
	ExtraArgs []string
	// Ignore the environment's external URI and always launch a server.
	IgnoreEnv bool
	// JVMArgs are appended to the JVM's options (before -jar); a later option wins, e.g.
	// "-XX:TieredStopAtLevel=4" lifts the default C1-only compilation.
	JVMArgs []string
	// Jar is the mongo-server.jar to run instead of JarPath's (e.g. an older build, to compare two side by side).
	Jar string
}

// Server is a MongoDB for tests: either external (from the environment) or a launched mongo-server.jar process.
type Server struct {
	// URI is the connection string, e.g. "mongodb://127.0.0.1:41234/".
	URI string

	external bool
	opts     Options
	jar      string

	mu     sync.Mutex
	port   int
	proc   *process
	stderr *tailBuffer
}

type process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error // valid after done is closed
}

// ExternalURI returns the URI from CRONSWAP_MONGO_URI or MONGODB_URI, or "".
func ExternalURI() string {
	if uri := strings.TrimSpace(os.Getenv(EnvURI)); uri != "" {
		return uri
	}
	return strings.TrimSpace(os.Getenv(EnvURIFallback))
}

// Start returns the external server named by the environment, or launches mongo-server.jar and waits until it
// listens. Stop (or Kill) it when done; a test binary that exits takes the server with it anyway.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if !opts.IgnoreEnv {
		if uri := ExternalURI(); uri != "" {
			return &Server{URI: uri, external: true, opts: opts}, nil
		}
	}
	jar := opts.Jar
	if jar == "" {
		var err error
		if jar, err = JarPath(); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(jar); err != nil {
		return nil, fmt.Errorf("testmongo: jar %s: %w", jar, err)
	}
	if _, err := exec.LookPath(javaPath()); err != nil {
		return nil, fmt.Errorf("testmongo: java not found (%v); install a JDK 17+ or set %s", err, EnvURI)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	s := &Server{opts: opts, jar: jar, port: opts.Port, stderr: newTailBuffer(64 << 10)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// External reports whether the server comes from the environment (not launched, not controllable).
func (s *Server) External() bool { return s.external }

// Port is the launched server's TCP port (0 for an external server).
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// PID is the launched server's process id, so that a benchmark can read
// what the server spent (its CPU in /proc); 0 for an external server or
// one that is not running.
func (s *Server) PID() int {
	if s.external {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Running reports whether the launched process is alive.
func (s *Server) Running() bool {
	if s.external {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Log returns the tail of the launched server's stderr.
func (s *Server) Log() string {
	if s.stderr == nil {
		return ""
	}
	return s.stderr.String()
}

// Stop shuts the launched server down gracefully (SIGTERM; the H2 file is committed) and waits for it; after 15s
// it is killed. Stopping a stopped server is a no-op. For an external server it returns nil and does nothing.
func (s *Server) Stop() error {
	if s.external {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(15 * time.Second)
}

// Kill kills the launched server at once (SIGKILL to its process group), like a crash, and waits for it to exit.
func (s *Server) Kill() error {
	if s.external {
		return ErrExternal
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(0)
}

// Restart stops the server if it runs (gracefully) and starts it again on the same port and with the same H2
// file. Clients reconnect by themselves; change streams resume (in memory, without H2File, the oplog is new and
// resuming from an old token fails with ChangeStreamHistoryLost).
func (s *Server) Restart(ctx context.Context) error {
	if s.external {
		return ErrExternal
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(15 * time.Second); err != nil {
		return err
	}
	return s.startLocked(ctx)
}

// StartAgain starts a server that was stopped or killed, on the same port and with the same H2 file.
func (s *Server) StartAgain(ctx context.Context) error {
	if s.external {
		return ErrExternal
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		return errors.New("testmongo: server is already running")
	}
	return s.startLocked(ctx)
}

// Pause freezes the server process (SIGSTOP): connections stay open but nothing answers, like a hung server or a
// network black hole. Resume undoes it.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	if s.external {
		return ErrExternal
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return errors.New("testmongo: server is not running")
	}
	return syscall.Kill(-s.proc.cmd.Process.Pid, sig)
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (s *Server) stopLocked(grace time.Duration) error {
	p := s.proc
	if p == nil || p.exited() {
		s.proc = nil
		return nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGCONT) // in case it is paused
	if grace > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	if !p.exited() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	_ = p.stdin.Close()
	s.proc = nil
	return nil
}

func (s *Server) startLocked(ctx context.Context) error {
	args := append([]string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k", "-Xmx1g"}, s.opts.JVMArgs...)
	args = append(args, "-jar", s.jar, "--port", strconv.Itoa(s.port))
	if s.opts.H2File != "" {
		args = append(args, "--h2", s.opts.H2File)
	}
	if s.opts.Raw {
		args = append(args, "--raw")
	}
	args = append(args, s.opts.ExtraArgs...)
	cmd := exec.Command(javaPath(), args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	// An io.Pipe (not StdoutPipe) so that Wait waits for stdout to be copied instead of closing it under the reader.
	stdout, stdoutW := io.Pipe()
	cmd.Stdout = stdoutW
	var logOut io.Writer = s.stderr
	if s.opts.Stderr != nil {
		logOut = io.MultiWriter(s.stderr, s.opts.Stderr)
	} else if v := os.Getenv(EnvLog); v != "" && v != "0" {
		logOut = io.MultiWriter(s.stderr, os.Stderr)
	}
	cmd.Stderr = logOut

	// Its own process group (Stop and Kill reach the JVM and anything it
	// forks), killed when the test binary dies: on Linux by the kernel, on
	// every platform by its stdin (a pipe from us) reaching EOF.
	if err := childproc.Start(cmd); err != nil {
		_ = stdoutW.Close()
		return fmt.Errorf("testmongo: starting %s: %w", cmd, err)
	}
	p := &process{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = stdoutW.Close()
		close(p.done)
	}()

	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, err := r.ReadString('\n')
		if err == nil {
			lines <- strings.TrimSpace(line)
		}
		close(lines)
		_, _ = io.Copy(io.Discard, r)
	}()

	timer := time.NewTimer(s.opts.StartTimeout)
	defer timer.Stop()
	fail := func(format string, a ...any) error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		msg := fmt.Sprintf(format, a...)
		if tail := strings.TrimSpace(s.stderr.String()); tail != "" {
			msg += "\nserver stderr:\n" + tail
		}
		return errors.New("testmongo: " + msg)
	}
	select {
	case line, ok := <-lines:
		if !ok || !strings.HasPrefix(line, "mongodb://") {
			<-p.done
			return fail("server exited before listening (%v; first line %q)", p.err, line)
		}
		port, err := portOf(line)
		if err != nil {
			return fail("unexpected first line %q: %v", line, err)
		}
		s.URI = line
		s.port = port
		s.proc = p
		return nil
	case <-timer.C:
		return fail("server did not print its URI within %s", s.opts.StartTimeout)
	case <-ctx.Done():
		return fail("start canceled: %v", ctx.Err())
	}
}

func portOf(uri string) (int, error) {
	hostPort := strings.TrimPrefix(uri, "mongodb://")
	hostPort = strings.TrimSuffix(hostPort, "/")
	i := strings.LastIndexByte(hostPort, ':')
	if i < 0 {
		return 0, errors.New("no port")
	}
	return strconv.Atoi(hostPort[i+1:])
}

func javaPath() string {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		p := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "java"
}

// RepoRoot finds the repository root: the nearest directory with a go.mod, searched upwards from the working
// directory and then from this source file's directory.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				if _, err := os.Stat(filepath.Join(d, "scripts", "mongo.sh")); err == nil {
					return d, nil
				}
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("testmongo: repository root (go.mod next to scripts/mongo.sh) not found")
}

// JarPath returns the path of mongo-server.jar, or an error that says how to build it.
func JarPath() (string, error) {
	if p := os.Getenv(EnvJar); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("testmongo: %s=%s: %w", EnvJar, p, err)
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, filepath.FromSlash(JarRelPath))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("testmongo: %s is missing: run `scripts/mongo.sh build` (needs JDK 17 and Maven), "+
			"or set %s to a MongoDB replica set", p, EnvURI)
	}
	return p, nil
}

// Connect opens a client with short timeouts suited to tests and pings the primary.
func Connect(ctx context.Context, uri string) (*mongo.Client, error) {
	opts := options.Client().ApplyURI(uri).
		SetServerSelectionTimeout(10 * time.Second).
		SetConnectTimeout(5 * time.Second).
		SetHeartbeatInterval(500 * time.Millisecond).
		SetAppName("cronswap-test")
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := client.Ping(pingCtx, readpref.Primary()); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, fmt.Errorf("testmongo: ping %s: %w", uri, err)
	}
	return client, nil
}

var shared struct {
	mu     sync.Mutex
	server *Server
	err    error
}

// Main starts the shared server (external or launched), calls setup with its URI when setup is not nil, runs the
// tests, stops the server and exits. Use it as the body of TestMain.
func Main(m *testing.M, setup func(uri string)) {
	os.Exit(run(m, setup))
}

func run(m *testing.M, setup func(uri string)) int {
	srv, err := sharedServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = srv.Stop() }()
	if setup != nil {
		setup(srv.URI)
	}
	return m.Run()
}

// Shared returns the test binary's shared server, starting it on first use (Main starts it up front). It fails
// the test if the server cannot be had. Do not Stop, Kill or Restart it: start a server of your own for that.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	srv, err := sharedServer()
	if err != nil {
		tb.Fatal(err)
	}
	return srv
}

func sharedServer() (*Server, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.server == nil && shared.err == nil {
		shared.server, shared.err = Start(context.Background(), Options{})
	}
	return shared.server, shared.err
}

// Client connects to the shared server and disconnects when the test ends. If the test fails, what the launched
// server logged while it ran is logged with it: a connection the server closed, a request it could not handle.
func Client(tb testing.TB) *mongo.Client {
	tb.Helper()
	srv := Shared(tb)
	srv.logOnFailure(tb)
	return ClientFor(tb, srv.URI)
}

// logOnFailure logs, when tb ends failed, what the launched server wrote to its log from now on (at most the tail
// the Server keeps).
func (s *Server) logOnFailure(tb testing.TB) {
	if s.stderr == nil {
		return
	}
	mark := s.stderr.mark()
	tb.Cleanup(func() {
		if !tb.Failed() {
			return
		}
		if log := strings.TrimSpace(s.stderr.since(mark)); log != "" {
			tb.Logf("test server log while %s ran:\n%s", tb.Name(), log)
		}
	})
}

// ClientFor connects to uri and disconnects when the test ends.
func ClientFor(tb testing.TB, uri string) *mongo.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := Connect(ctx, uri)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	return client
}

// ProxiedClient puts a fault proxy (internal/faultproxy) in front of the shared server and returns it with a
// client connected through it, for tests that hold, fail or count what one party sends. Both are closed when
// the test ends, the client first.
func ProxiedClient(tb testing.TB) (*faultproxy.Proxy, *mongo.Client) {
	tb.Helper()
	uri := Shared(tb).URI
	upstream, ok := faultproxy.Upstream(uri)
	if !ok {
		tb.Fatalf("cannot put a fault proxy in front of %q", uri)
	}
	p, err := faultproxy.New(context.Background(), upstream)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() }) // registered first: runs after the client's disconnect
	return p, ClientFor(tb, p.URI(uri))
}

// NewDatabase returns a database with a name unique to this test and drops it when the test ends.
func NewDatabase(tb testing.TB, client *mongo.Client) *mongo.Database {
	tb.Helper()
	name := DatabaseName(tb.Name())
	db := client.Database(name)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			tb.Logf("testmongo: dropping %s: %v", name, err)
		}
	})
	return db
}

// DatabaseName turns a test name into a unique, valid database name: "t_" + the name's safe characters
// (at most 40) + "_" + 8 random hex digits.
func DatabaseName(testName string) string {
	var b strings.Builder
	for _, r := range testName {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return "t_" + b.String() + "_" + hex.EncodeToString(suffix[:])
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	buf     bytes.Buffer
	written int64 // bytes written in all
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	t.written += int64(len(p))
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

// mark is the position of the next byte to be written, for since.
func (t *tailBuffer) mark() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.written
}

// since returns what was written from mark on, as much of it as the buffer still holds.
func (t *tailBuffer) since(mark int64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.written - mark
	if n <= 0 {
		return ""
	}
	b := t.buf.Bytes()
	if n < int64(len(b)) {
		b = b[int64(len(b))-n:]
	}
	return string(b)
}
