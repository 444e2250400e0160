package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

// dialTimeout bounds each upstream connection attempt.
const dialTimeout = 10 * time.Second

// ErrorReply is a server error the proxy returns in place of a command's
// real reply. The body it produces is {ok: 0.0, errmsg: Errmsg, code: Code,
// codeName: CodeName, errorLabels: Labels}. errorLabels is left out when
// Labels is empty, and errmsg defaults to a fixed text when Errmsg is empty.
type ErrorReply struct {
	Code     int32    // server error code, e.g. 286
	CodeName string   // e.g. "ChangeStreamHistoryLost"
	Errmsg   string   // human-readable message
	Labels   []string // errorLabels, e.g. "ResumableChangeStreamError"
}

// Stats is a snapshot of what a Proxy has seen since it was created or since
// the last ResetStats.
type Stats struct {
	// Commands counts every decoded client command by name, whether it was
	// forwarded or failed.
	Commands map[string]int
	// Injected counts, by command name, the commands that were answered with
	// an injected ErrorReply (or dropped, for moreToCome requests) instead
	// of being forwarded.
	Injected map[string]int
	// Opaque counts client messages forwarded without inspection
	// (OP_COMPRESSED, non-command OP_QUERY, other opcodes, malformed OP_MSG).
	Opaque int
	// Connections counts client connections that were proxied to upstream.
	Connections int
	// Active is the number of proxied connections currently open.
	Active int
	// Refused counts client connections closed on accept by RefuseFor.
	Refused int
	// DialFailures counts client connections closed because upstream could
	// not be reached.
	DialFailures int
	// Cuts counts connections severed by CutAll, Outage or CutNext.
	Cuts int
}

// fault is one armed failure rule.
type fault struct {
	match Matcher
	reply ErrorReply
	cut   bool // close the connection instead of replying
	// cutAfter forwards the command and closes the connection when its
	// reply arrives, instead of delivering it: the command took effect
	// upstream, but the client never learns its outcome.
	cutAfter bool
	// hold keeps the command back until released, then forwards it.
	hold *Hold
	// remaining is the number of further commands to fail; negative means
	// unlimited and zero means spent or cleared. Guarded by Proxy.mu.
	remaining int
}

// Proxy is a loopback TCP proxy in front of one MongoDB server that can
// inject command errors and network faults. Create it with New. All methods
// are safe for concurrent use.
type Proxy struct {
	upstream string
	ln       net.Listener
	ctx      context.Context // canceled by Close; bounds upstream dials
	cancel   context.CancelFunc
	stopCtx  func() bool // unregisters the New context's AfterFunc
	wg       sync.WaitGroup
	reqID    atomic.Int32 // requestIDs of injected replies

	mu          sync.Mutex
	closed      bool
	conns       map[*proxyConn]struct{}
	refuseUntil time.Time
	faults      []*fault
	stats       Stats

	csMu      sync.Mutex
	csCursors map[int64]struct{} // cursor IDs of change streams seen
}

// New starts a proxy listening on 127.0.0.1 (kernel-chosen port) that
// forwards each accepted connection to upstream, a "host:port" address.
// Upstream is dialled lazily, once per client connection. The proxy is closed
// when ctx is done or Close is called.
func New(ctx context.Context, upstream string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("faultproxy: upstream address %q: %w", upstream, err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		upstream:  upstream,
		ln:        ln,
		ctx:       pctx,
		cancel:    cancel,
		conns:     make(map[*proxyConn]struct{}),
		csCursors: make(map[int64]struct{}),
	}
	p.stats = newStats()
	p.stopCtx = context.AfterFunc(ctx, func() { _ = p.Close() })
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

func newStats() Stats {
	return Stats{Commands: map[string]int{}, Injected: map[string]int{}}
}

// Addr returns the proxy's listening address, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream returns the upstream address given to New.
func (p *Proxy) Upstream() string { return p.upstream }

// Close stops accepting, severs every connection and waits for the proxy's
// goroutines to finish. Connections closed by Close are not counted as cuts.
// Close is idempotent: a second call (or one racing the context's) returns
// once the first has finished severing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		// No Add happens once closed is set, so this Wait is safe.
		p.wg.Wait()
		return nil
	}
	p.closed = true
	conns := slices.Collect(maps.Keys(p.conns))
	p.mu.Unlock()

	p.stopCtx()
	p.cancel()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

// CutAll immediately closes every open client connection and its upstream
// connection, as if the network between client and server had failed. Any
// in-flight operation sees a network error; the client may reconnect at
// once (combine with RefuseFor, or use Outage, to keep it out). It returns
// the number of connections cut.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	conns := slices.Collect(maps.Keys(p.conns))
	p.mu.Unlock()
	n := 0
	for _, c := range conns {
		if c.close() {
			n++
		}
	}
	p.mu.Lock()
	p.stats.Cuts += n
	p.mu.Unlock()
	return n
}

// RefuseFor makes the proxy refuse new connections for d: each is accepted
// and closed at once, so the client's connection handshake fails quickly
// with a network error (rather than hanging until its connect timeout).
// Existing connections are not affected. A later call replaces the period;
// RefuseFor(0) ends it.
func (p *Proxy) RefuseFor(d time.Duration) {
	p.mu.Lock()
	p.refuseUntil = time.Now().Add(d)
	p.mu.Unlock()
}

// Outage simulates the server becoming unreachable for d: it refuses new
// connections for d (RefuseFor) and severs every existing one (CutAll).
func (p *Proxy) Outage(d time.Duration) {
	p.RefuseFor(d)
	p.CutAll()
}

// FailNext arms a one-shot fault: the next client command matching m is
// answered with reply instead of being forwarded. Faults are tried in the
// order they were armed; the first that matches is used.
func (p *Proxy) FailNext(m Matcher, reply ErrorReply) { p.FailTimes(1, m, reply) }

// FailTimes is like FailNext but fails the next n matching commands.
// n <= 0 arms nothing.
func (p *Proxy) FailTimes(n int, m Matcher, reply ErrorReply) {
	if n <= 0 {
		return
	}
	p.arm(&fault{match: m, reply: cloneReply(reply), remaining: n})
}

// FailAlways fails every matching command until ClearFailures.
func (p *Proxy) FailAlways(m Matcher, reply ErrorReply) {
	p.arm(&fault{match: m, reply: cloneReply(reply), remaining: -1})
}

// CutNext arms a one-shot fault that, like failCommand's closeConnection,
// closes the client connection (and its upstream connection) when the next
// command matching m arrives, without forwarding it. The client sees a
// network error for that command. It counts as a cut.
func (p *Proxy) CutNext(m Matcher) {
	p.arm(&fault{match: m, cut: true, remaining: 1})
}

// CutAfterNext arms a one-shot fault that forwards the next command
// matching m to upstream and then, when upstream replies, closes the
// client connection instead of delivering the reply: the command takes
// effect, but the client sees a network error and does not know its
// outcome (a primary that applied a write and then lost its connections,
// or a network cut on the way back). It counts as a cut.
func (p *Proxy) CutAfterNext(m Matcher) {
	p.arm(&fault{match: m, cutAfter: true, remaining: 1})
}

// Hold is a command held back by HoldNext: what a client sees when its
// command is stuck on the way to a busy server.
type Hold struct {
	held, release, answered chan struct{}
	releaseOnce             sync.Once
}

// HoldNext arms a one-shot fault that keeps the next command matching m
// back, neither forwarded nor answered, until Release: the client waits
// for its reply, or gives up on it (a cancelled context) while the command
// is still on its way. Released, the command is forwarded even when its
// client has gone, and takes effect then: a write the client abandoned can
// land after it moved on. Close releases it too (without forwarding).
func (p *Proxy) HoldNext(m Matcher) *Hold {
	h := &Hold{held: make(chan struct{}), release: make(chan struct{}), answered: make(chan struct{})}
	p.arm(&fault{match: m, hold: h, remaining: 1})
	return h
}

// Held is closed once a matching command is held.
func (h *Hold) Held() <-chan struct{} { return h.held }

// Release forwards the held command (or, when none is held yet, the next
// matching one at once). It is idempotent.
func (h *Hold) Release() { h.releaseOnce.Do(func() { close(h.release) }) }

// Answered is closed once the server replied to the released command: it
// has taken effect, whether or not its client was still there to read the
// reply. It stays open for a request that expects no reply (moreToCome).
func (h *Hold) Answered() <-chan struct{} { return h.answered }

// ClearFailures disarms every fault armed by FailNext, FailTimes,
// FailAlways, CutNext, CutAfterNext and HoldNext (a command already held
// stays held until its Release).
func (p *Proxy) ClearFailures() {
	p.mu.Lock()
	for _, f := range p.faults {
		f.remaining = 0
	}
	p.faults = nil
	p.mu.Unlock()
}

func (p *Proxy) arm(f *fault) {
	if f.match == nil {
		panic("faultproxy: nil Matcher")
	}
	p.mu.Lock()
	p.faults = append(p.faults, f)
	p.mu.Unlock()
}

func cloneReply(r ErrorReply) ErrorReply {
	r.Labels = slices.Clone(r.Labels)
	return r
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Commands = maps.Clone(p.stats.Commands)
	s.Injected = maps.Clone(p.stats.Injected)
	s.Active = len(p.conns)
	return s
}

// ResetStats zeroes every counter (Active is always computed live).
func (p *Proxy) ResetStats() {
	p.mu.Lock()
	p.stats = newStats()
	p.mu.Unlock()
}

// ChangeStreamGetMore returns a Matcher for getMore commands on a change
// stream cursor. It recognises the cursor IDs returned by change-stream
// aggregates (IsChangeStreamAggregate) that went through this proxy, so it
// does not match getMores of ordinary find/aggregate cursors, and it follows
// the new cursor after the driver resumes a stream.
func (p *Proxy) ChangeStreamGetMore() Matcher {
	return func(cmd bsoncore.Document) bool {
		if commandNameOf(cmd) != "getMore" {
			return false
		}
		id, ok := cmd.Lookup("getMore").AsInt64OK()
		if !ok {
			return false
		}
		p.csMu.Lock()
		_, ok = p.csCursors[id]
		p.csMu.Unlock()
		return ok
	}
}

func (p *Proxy) noteChangeStreamCursor(id int64) {
	if id == 0 {
		return
	}
	p.csMu.Lock()
	p.csCursors[id] = struct{}{}
	p.csMu.Unlock()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Unexpected listener failure (e.g. out of file descriptors):
			// back off briefly rather than spin.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			_ = c.Close()
			return
		case time.Now().Before(p.refuseUntil):
			p.stats.Refused++
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		pc := &proxyConn{p: p, client: c, pendingCS: map[int32]struct{}{}, cutOnReply: map[int32]struct{}{},
			heldReplies: map[int32]*Hold{}}
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go pc.run()
	}
}

// decide records req in the stats and returns the fault to apply to it, or
// nil to forward it. Matchers run without p.mu held.
func (p *Proxy) decide(req request) *fault {
	p.mu.Lock()
	if req.cmd == nil {
		p.stats.Opaque++
		p.mu.Unlock()
		return nil
	}
	p.stats.Commands[req.name]++
	armed := slices.Clone(p.faults)
	p.mu.Unlock()

	for _, f := range armed {
		if !f.match(req.cmd) {
			continue
		}
		p.mu.Lock()
		if f.remaining == 0 { // spent concurrently, or cleared
			p.mu.Unlock()
			continue
		}
		if f.remaining > 0 {
			f.remaining--
			if f.remaining == 0 {
				p.faults = slices.DeleteFunc(p.faults, func(g *fault) bool { return g == f })
			}
		}
		switch {
		case f.hold != nil:
		case f.cut || f.cutAfter:
			p.stats.Cuts++
		default:
			p.stats.Injected[req.name]++
		}
		p.mu.Unlock()
		return f
	}
	return nil
}

// proxyConn is one client connection and its upstream connection.
type proxyConn struct {
	p      *Proxy
	client net.Conn

	// writeMu serialises whole-message writes to client, so injected
	// replies never interleave with forwarded ones.
	writeMu sync.Mutex

	mu       sync.Mutex
	upstream net.Conn // nil until dialled
	closed   bool
	// pendingCS holds the requestIDs of forwarded change-stream
	// aggregates whose replies have not been seen yet.
	pendingCS map[int32]struct{}
	// cutOnReply holds the requestIDs of commands forwarded under a
	// CutAfterNext fault: their reply closes the connection.
	cutOnReply map[int32]struct{}
	// heldReplies maps the requestIDs of released held commands to their
	// Hold, told when the reply arrives.
	heldReplies map[int32]*Hold
}

// close severs both sides. It reports whether this call did the closing.
func (c *proxyConn) close() bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.closed = true
	up := c.upstream
	c.mu.Unlock()
	_ = c.client.Close()
	if up != nil {
		_ = up.Close()
	}
	return true
}

func (c *proxyConn) run() {
	p := c.p
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		p.wg.Done()
	}()

	d := net.Dialer{Timeout: dialTimeout}
	up, err := d.DialContext(p.ctx, "tcp", p.upstream)
	if err != nil {
		p.mu.Lock()
		p.stats.DialFailures++
		p.mu.Unlock()
		return
	}
	c.mu.Lock()
	if c.closed { // cut while dialling
		c.mu.Unlock()
		_ = up.Close()
		return
	}
	c.upstream = up
	c.mu.Unlock()

	p.mu.Lock()
	p.stats.Connections++
	p.mu.Unlock()

	done := make(chan struct{})
	go func() {
		defer close(done)
		c.serverToClient(up)
		c.close()
	}()
	c.clientToServer(up)
	c.awaitHeldReplies(done)
	c.close()
	<-done
}

// awaitHeldReplies waits, once the client side has ended, for the replies
// to released held commands (see HoldNext): the command takes effect even
// though its client has gone. It returns early when upstream ends (done)
// or the proxy is closed.
func (c *proxyConn) awaitHeldReplies(done <-chan struct{}) {
	c.mu.Lock()
	holds := slices.Collect(maps.Values(c.heldReplies))
	c.mu.Unlock()
	for _, h := range holds {
		select {
		case <-h.answered:
		case <-done:
			return
		case <-c.p.ctx.Done():
			return
		}
	}
}

func (c *proxyConn) writeClient(msg []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err := c.client.Write(msg)
	return err
}

// clientToServer is the intercepting pump.
func (c *proxyConn) clientToServer(up net.Conn) {
	r := bufio.NewReaderSize(c.client, 64<<10)
	for {
		msg, err := readMessage(r)
		if err != nil {
			return
		}
		req := parseRequest(msg)
		f := c.p.decide(req)
		switch {
		case f == nil:
			if req.cmd != nil && IsChangeStreamAggregate(req.cmd) {
				c.mu.Lock()
				c.pendingCS[req.requestID] = struct{}{}
				c.mu.Unlock()
			}
			if _, err := up.Write(msg); err != nil {
				return
			}
		case f.cut:
			return
		case f.hold != nil:
			if !c.forwardHeld(up, req, msg, f.hold) {
				return
			}
		case f.cutAfter:
			c.mu.Lock()
			c.cutOnReply[req.requestID] = struct{}{}
			c.mu.Unlock()
			if _, err := up.Write(msg); err != nil {
				return
			}
		case req.moreToCome:
			// The client expects no reply: swallow the request.
		default:
			reply := replyTo(req, c.p.reqID.Add(1), f.reply.errorBody())
			if err := c.writeClient(reply); err != nil {
				return
			}
		}
	}
}

// forwardHeld keeps msg back until h is released, then forwards it and
// has its reply reported to h. It reports whether the connection goes on.
func (c *proxyConn) forwardHeld(up net.Conn, req request, msg []byte, h *Hold) bool {
	close(h.held)
	select {
	case <-h.release:
	case <-c.p.ctx.Done():
		return false
	}
	if !req.moreToCome { // a moreToCome request gets no reply to wait for
		c.mu.Lock()
		c.heldReplies[req.requestID] = h
		c.mu.Unlock()
	}
	_, err := up.Write(msg)
	return err == nil
}

// serverToClient forwards every upstream message unchanged, independently
// of requests (streamed moreToCome replies included).
func (c *proxyConn) serverToClient(up net.Conn) {
	r := bufio.NewReaderSize(up, 64<<10)
	for {
		msg, err := readMessage(r)
		if err != nil {
			return
		}
		if _, _, respTo, _, _, ok := wiremessage.ReadHeader(msg); ok {
			c.mu.Lock()
			_, isCS := c.pendingCS[respTo]
			delete(c.pendingCS, respTo)
			_, cut := c.cutOnReply[respTo]
			hold := c.heldReplies[respTo]
			delete(c.heldReplies, respTo)
			c.mu.Unlock()
			if hold != nil {
				close(hold.answered)
			}
			if cut {
				return // the reply is lost; run closes both sides
			}
			if isCS {
				if id, ok := replyCursorID(msg); ok {
					c.p.noteChangeStreamCursor(id)
				}
			}
		}
		if err := c.writeClient(msg); err != nil {
			return
		}
	}
}
