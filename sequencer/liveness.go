package sequencer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Liveness: removing a killed instance from the group at once.
//
// A static member that dies sends nothing: the broker notices at its
// session timeout (8s by default, and brokers refuse less than 6s), and
// its partitions wait that long. But the kernel of a killed process
// closes its sockets at once. So every instance listens on a small TCP
// port of its own (Config.Liveness), advertises it in its JoinGroup
// metadata, and keeps one connection to each other instance of the
// group. When such a connection closes without the goodbye a deliberate
// stop sends, and a fresh dial is refused (nothing listens there any
// more), the watcher removes the dead instance from the group with the
// admin LeaveGroup by group.instance.id (KIP-345), naming the member id
// it saw, and rejoins: the rebalance starts at once instead of one
// session later. A machine that vanishes (no FIN, no RST), a network
// partition or a hung process leave the connection open or the dial
// unanswered: the session timeout decides, as before.
//
// Safety does not rest on this: a false removal of a live instance is a
// rebalance, which exactly once survives by design. The removed member's
// next heartbeat or commit fails, its open transaction can no longer
// commit input offsets for the generation it was in (KIP-447), the new
// owner fences it at assignment (takeover.go), and the removed instance
// rejoins. Bounds: an instance never removes itself (its instance id, its
// member id, its own address), removes an instance only with the member
// id it watched (a restarted instance has a new one: the broker answers
// FENCED_INSTANCE_ID), at most once per session timeout per member, and
// only after it saw that member listening at that address (a refused
// dial to an address never seen listening proves nothing: it is logged,
// not acted on). The listener reveals nothing (it writes only the
// goodbye, at a deliberate stop) and accepts nothing (a connection that
// sends a byte is closed), and holds at most maxLivenessConns
// connections.

// livenessGoodbye is what a stopping instance writes to its watchers.
const livenessGoodbye = "canon-liveness-bye\n"

// maxLivenessConns bounds the connections a liveness listener holds: one
// per other instance of the group is what it needs.
const maxLivenessConns = 1024

const (
	// livenessRefresh is how often the watchers read the group's members
	// besides after each assignment.
	livenessRefresh = 10 * time.Second
	// livenessRecheck is how soon the watches read the group's members
	// again after a description taken during a rebalance.
	livenessRecheck = 500 * time.Millisecond
	// livenessRetry is how long a watch waits after a dial that failed
	// without a refusal, or after a connection that dropped at once.
	livenessRetry = 2 * time.Second
)

// liveness is an instance's listener and its watches of the others.
type liveness struct {
	s    *Sequencer
	log  *slog.Logger
	ln   net.Listener
	addr string // advertised: what the others dial

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	bye     bool
	watches map[string]*livenessWatch // by instance id
	removed map[string]time.Time      // by member id: the last removal
	alive   map[livenessPeer]bool     // peers seen listening
	group   *kgo.Client               // the group session's client, for ForceRebalance
	refresh chan struct{}
}

// livenessPeer is another member of the group as DescribeGroups shows it.
type livenessPeer struct {
	instance, member, addr string
}

type livenessWatch struct {
	peer   livenessPeer
	cancel context.CancelFunc
}

// newLiveness listens on listen and works out the address to advertise:
// advertise when given, else the listener's address when it names a
// host, else the local address the host routes to the first broker from.
func newLiveness(s *Sequencer, listen, advertise string) (*liveness, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("liveness listener on %s (set another address, or disable it): %w", listen, err)
	}
	addr, err := advertisedAddr(ln.Addr().(*net.TCPAddr), advertise, s.cfg.Kafka.Brokers)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	return &liveness{
		s: s, log: s.log.With("liveness", addr), ln: ln, addr: addr,
		conns: map[net.Conn]struct{}{}, watches: map[string]*livenessWatch{}, removed: map[string]time.Time{}, alive: map[livenessPeer]bool{},
		refresh: make(chan struct{}, 1),
	}, nil
}

func advertisedAddr(bound *net.TCPAddr, advertise string, brokers []string) (string, error) {
	if advertise != "" {
		if _, _, err := net.SplitHostPort(advertise); err != nil {
			return "", fmt.Errorf("liveness advertised address %q: use host:port: %w", advertise, err)
		}
		return advertise, nil
	}
	if !bound.IP.IsUnspecified() {
		return bound.String(), nil
	}
	// The address this host reaches the brokers from is one the other
	// instances, which reach the same brokers, most likely reach it at.
	// A UDP "connection" sends nothing; it only picks the route.
	for _, b := range brokers {
		c, err := net.Dial("udp", b)
		if err != nil {
			continue
		}
		ip := c.LocalAddr().(*net.UDPAddr).IP
		_ = c.Close()
		return net.JoinHostPort(ip.String(), fmt.Sprint(bound.Port)), nil
	}
	return "", fmt.Errorf("liveness: no route to the brokers %v to pick the address to advertise: set it (--liveness-advertise host:port)", brokers)
}

// run serves the listener and keeps the watches until ctx ends, then says
// goodbye: a deliberate stop is no death.
func (l *liveness) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(l.serve)
	wg.Go(func() { l.watchLoop(ctx) })
	<-ctx.Done()
	l.goodbye()
	wg.Wait()
}

func (l *liveness) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed by goodbye
		}
		l.mu.Lock()
		if l.bye || len(l.conns) >= maxLivenessConns {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		go func() {
			// Accept nothing: the first byte, or the peer's close, ends
			// the connection.
			var b [1]byte
			_, _ = c.Read(b[:])
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// goodbye tells every watcher that this instance stops deliberately, and
// closes the listener.
func (l *liveness) goodbye() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bye {
		return
	}
	l.bye = true
	_ = l.ln.Close()
	for c := range l.conns {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = io.WriteString(c, livenessGoodbye)
		_ = c.Close()
	}
}

// assigned notes the group session's client after each assignment and
// makes the watches follow the group's members.
func (l *liveness) assigned(cl *kgo.Client) {
	l.mu.Lock()
	l.group = cl
	l.mu.Unlock()
	l.poke()
}

// poke makes the watches read the group's members now.
func (l *liveness) poke() {
	select {
	case l.refresh <- struct{}{}:
	default:
	}
}

func (l *liveness) watchLoop(ctx context.Context) {
	adm, err := l.s.cfg.Kafka.Aux("liveness").NewClient()
	if err != nil {
		l.log.Error("liveness watches not started: a killed instance is removed at its session timeout only", "err", err)
		return
	}
	defer adm.Close()
	l.watchMembers(ctx, adm)
}

func (l *liveness) watchMembers(ctx context.Context, adm *kgo.Client) {
	defer func() {
		l.mu.Lock()
		for _, w := range l.watches {
			w.cancel()
		}
		l.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.refresh:
		case <-time.After(livenessRefresh):
		}
		peers, ok, err := l.peers(ctx, adm)
		if err != nil && ctx.Err() == nil {
			l.log.Warn("read the group's members for the liveness watches", "err", err)
		}
		if !ok {
			if err == nil {
				time.AfterFunc(livenessRecheck, l.poke) // rebalancing: look again soon
			}
			continue
		}
		l.follow(ctx, adm, peers)
	}
}

// peers returns the other static members of the group, with the
// liveness address each advertises ("" when its metadata does not show
// one). ok is false while the group rebalances: DescribeGroups then shows
// the members without their metadata, which says nothing about them.
func (l *liveness) peers(ctx context.Context, adm *kgo.Client) (peers []livenessPeer, ok bool, err error) {
	groups, err := kadm.NewClient(adm).DescribeGroups(ctx, l.s.cfg.Group)
	if err != nil {
		return nil, false, err
	}
	g := groups[l.s.cfg.Group]
	if g.Err != nil {
		return nil, false, g.Err
	}
	if g.State != "Stable" {
		return nil, false, nil
	}
	for _, m := range g.Members {
		if m.InstanceID == nil || *m.InstanceID == l.s.cfg.InstanceID {
			continue // dynamic members cannot be removed by id; never ourselves
		}
		p := livenessPeer{instance: *m.InstanceID, member: m.MemberID}
		if meta, ok := m.Join.AsConsumer(); ok {
			if _, addr, err := decodeMemberData(meta.UserData); err == nil && addr != l.addr {
				p.addr = addr
			}
		}
		peers = append(peers, p)
	}
	return peers, true, nil
}

// follow starts a watch of each new peer and ends those of peers gone or
// changed. A peer whose metadata shows no address keeps its watch.
func (l *liveness) follow(ctx context.Context, adm *kgo.Client, peers []livenessPeer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	present := map[string]bool{}
	for _, p := range peers {
		present[p.instance] = true
		w, ok := l.watches[p.instance]
		if ok && (w.peer == p || p.addr == "" && w.peer.member == p.member) {
			continue
		}
		if ok {
			l.log.Info("another instance changed; watching it anew", "instance", p.instance, "was", w.peer, "now", p)
			w.cancel()
			delete(l.watches, p.instance)
		}
		if p.addr == "" {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		l.watches[p.instance] = &livenessWatch{peer: p, cancel: cancel}
		go l.watch(wctx, adm, p)
	}
	for id, w := range l.watches {
		if !present[id] {
			w.cancel()
			delete(l.watches, id)
		}
	}
	for p := range l.alive {
		if !present[p.instance] {
			delete(l.alive, p)
		}
	}
}

// watch holds a connection to p until p says goodbye, dies, or the watch
// ends. A dial that is refused means dead only once p was seen listening
// (by this watch or an earlier one of the same member at the same
// address): the first dial to an address proves nothing about the peer.
func (l *liveness) watch(ctx context.Context, adm *kgo.Client, p livenessPeer) {
	var d net.Dialer
	warned := false
	var backoff time.Duration
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := d.DialContext(dctx, "tcp", p.addr)
		cancel()
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) && l.wasAlive(p) {
				l.remove(ctx, adm, p)
				return
			}
			if !warned && ctx.Err() == nil {
				l.log.Warn("cannot reach another instance's liveness address: its crash will be noticed at its session timeout (check its --liveness-advertise and the firewall)",
					"instance", p.instance, "addr", p.addr, "err", err)
				warned = true
			}
			if !sleepCtx(ctx, livenessRetry) {
				return
			}
			continue
		}
		if !l.wasAlive(p) {
			l.log.Info("watching another instance's liveness", "instance", p.instance, "member_id", p.member, "addr", p.addr)
		}
		l.markAlive(p)
		start := time.Now()
		l.s.m.livenessPeers.Inc()
		h := l.hold(ctx, c)
		l.s.m.livenessPeers.Dec()
		switch h {
		case heldGoodbye:
			l.log.Info("another instance stops deliberately", "instance", p.instance)
			return
		case heldStrange:
			l.log.Warn("another instance's liveness address answers something else; not watching it", "instance", p.instance, "addr", p.addr)
			return
		case heldEnded:
			return
		}
		l.log.Info("liveness connection dropped without a goodbye; dialing again", "instance", p.instance, "held", time.Since(start).Round(time.Millisecond))
		// Dropped without a goodbye: the loop dials again at once, and a
		// refusal is a death. A dying process's listener may still take
		// that dial for a moment (the kernel closes its sockets one by
		// one) and then drop it: connections that drop at once are dialed
		// again after a backoff that doubles from 10ms to livenessRetry,
		// so neither a death is missed nor a listener at its connection
		// limit dialed in a loop.
		if time.Since(start) >= livenessRetry {
			backoff = 0
			continue
		}
		backoff = min(max(10*time.Millisecond, 2*backoff), livenessRetry)
		if !sleepCtx(ctx, backoff) {
			return
		}
	}
}

func (l *liveness) markAlive(p livenessPeer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.alive[p] = true
}

func (l *liveness) wasAlive(p livenessPeer) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.alive[p]
}

type held int

const (
	heldDropped held = iota
	heldGoodbye
	heldStrange
	heldEnded
)

// hold reads c until it ends: the goodbye, anything else, a drop, or the
// watch's end.
func (l *liveness) hold(ctx context.Context, c net.Conn) held {
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	buf := make([]byte, len(livenessGoodbye))
	n, err := io.ReadFull(c, buf)
	switch {
	case ctx.Err() != nil:
		return heldEnded
	case err == nil && string(buf) == livenessGoodbye:
		return heldGoodbye
	case n > 0 && string(buf[:n]) != livenessGoodbye[:n]:
		return heldStrange
	case n > 0:
		// Part of the goodbye: the stop was deliberate.
		return heldGoodbye
	}
	return heldDropped
}

// remove takes a dead peer out of the group and rejoins, so that the
// rebalance starts now.
func (l *liveness) remove(ctx context.Context, adm *kgo.Client, p livenessPeer) {
	// At most one removal per member id (an instance restarted on the
	// same id is a new member, and may die again) per session timeout.
	l.mu.Lock()
	last, ok := l.removed[p.member]
	limited := ok && time.Since(last) < l.s.cfg.SessionTimeout
	if !limited {
		for m, at := range l.removed {
			if time.Since(at) >= l.s.cfg.SessionTimeout {
				delete(l.removed, m)
			}
		}
		l.removed[p.member] = time.Now()
	}
	l.mu.Unlock()
	if p.instance == l.s.cfg.InstanceID || p.member == l.s.memberIDNow() {
		return
	}
	if limited {
		l.log.Info("not removing a member removed less than a session timeout ago", "instance", p.instance, "member_id", p.member)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = l.s.cfg.Group
	m := kmsg.NewLeaveGroupRequestMember()
	// The member id makes the removal exact: an instance that restarted
	// meanwhile has a new one, and the broker refuses (FENCED_INSTANCE_ID).
	m.MemberID, m.InstanceID = p.member, kmsg.StringPtr(p.instance)
	reason := fmt.Sprintf("canon liveness: %s closed without a goodbye and refuses connections; removed by %s", p.instance, l.s.cfg.InstanceID)
	m.Reason = &reason
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, adm)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err == nil && len(resp.Members) == 1 {
		err = kerr.ErrorForCode(resp.Members[0].ErrorCode)
	}
	switch {
	case err == nil:
		l.s.m.livenessRemovals.Inc()
		l.log.Warn("removed a dead instance from the group: its liveness connection closed without a goodbye and its address refuses connections",
			"instance", p.instance, "member_id", p.member)
	case errors.Is(err, kerr.UnknownMemberID):
		l.log.Info("a dead instance had left the group already", "instance", p.instance)
	default:
		// FENCED_INSTANCE_ID: it restarted with a new member id; others:
		// its session timeout decides.
		l.log.Info("did not remove an instance whose liveness connection closed", "instance", p.instance, "err", err)
		return
	}
	l.mu.Lock()
	cl := l.group
	l.mu.Unlock()
	if cl != nil {
		cl.ForceRebalance() // join the rebalance now, not at the next heartbeat
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// leaveOnStop removes this static instance from the group after its
// session closed: a static member that closes does not leave (KIP-345),
// so its partitions would wait a session timeout for another owner.
func (s *Sequencer) leaveOnStop() {
	member := s.memberIDNow()
	if !s.static || s.cfg.KeepPartitionsOnStop || member == "" {
		return
	}
	cl, err := s.cfg.Kafka.Aux("leave").NewClient()
	if err != nil {
		s.log.Warn("leave the group at stop; the partitions move at the session timeout", "err", err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = s.cfg.Group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID, m.InstanceID = member, kmsg.StringPtr(s.cfg.InstanceID)
	reason := "canon: instance stopped"
	m.Reason = &reason
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err == nil && len(resp.Members) == 1 {
		err = kerr.ErrorForCode(resp.Members[0].ErrorCode)
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		s.log.Warn("leave the group at stop; the partitions move at the session timeout", "err", err)
		return
	}
	s.log.Info("left the group at stop", "group", s.cfg.Group, "instance", s.cfg.InstanceID)
}

// memberIDNow is the member id of the latest assignment.
func (s *Sequencer) memberIDNow() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memberID
}

// livenessAddr is the advertised liveness address, "" without one.
func (s *Sequencer) livenessAddr() string {
	if s.live == nil {
		return ""
	}
	return s.live.addr
}
