package daemon

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/roce"
)

// Resource is one kind of thing a client can make the daemon hold, which
// budgets bound per uid and for the whole daemon.
type Resource int

// The resources a budget bounds.
const (
	ResConns      Resource = iota // connections
	ResFDs                        // descriptors the daemon holds for clients
	ResMaps                       // mappings in the daemon (shared queues and registered memory)
	ResQPs                        // QPs
	ResMRs                        // MRs and MWs
	ResRegBytes                   // bytes registered
	ResQueueBytes                 // bytes of queues (shared rings, the engine's queues) and of small objects (PDs, AHs, CM IDs)
	numResources
)

// resourceKeys are the resources' names in --limit-user and --limit-total
// and in metrics labels.
var resourceKeys = [numResources]string{"conns", "fds", "maps", "qps", "mrs", "reg", "queue"}

// String returns the resource's key ("qps").
func (r Resource) String() string {
	if r < 0 || r >= numResources {
		return "resource(" + strconv.Itoa(int(r)) + ")"
	}
	return resourceKeys[r]
}

// isBytes tells the resources counted in bytes.
func (r Resource) isBytes() bool { return r == ResRegBytes || r == ResQueueBytes }

// errno is what a request over this resource's budget fails with, as the
// kernel answers: EAGAIN for connections (as for a process over
// RLIMIT_NPROC), EMFILE for descriptors, ENOMEM for the rest.
func (r Resource) errno() unix.Errno {
	switch r {
	case ResConns:
		return unix.EAGAIN
	case ResFDs:
		return unix.EMFILE
	}
	return unix.ENOMEM
}

// Budget bounds each resource: Budget[ResQPs] is the QPs allowed. In
// Options a zero entry takes the default.
type Budget [numResources]uint64

// String formats the budget as --limit-user takes it.
func (b Budget) String() string {
	var parts []string
	for r := Resource(0); r < numResources; r++ {
		v := strconv.FormatUint(b[r], 10)
		if r.isBytes() {
			v = formatBytes(b[r])
		}
		parts = append(parts, resourceKeys[r]+"="+v)
	}
	return strings.Join(parts, ",")
}

func formatBytes(n uint64) string {
	for _, u := range []struct {
		s     string
		shift uint
	}{{"G", 30}, {"M", 20}, {"K", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatUint(n>>u.shift, 10) + u.s
		}
	}
	return strconv.FormatUint(n, 10)
}

// ParseBudget parses "conns=N,fds=N,maps=N,qps=N,mrs=N,reg=BYTES,queue=BYTES"
// (any subset, in any order). BYTES take a K, M or G suffix (powers of
// 1024). Keys left out are zero (the default); a key given must be a
// positive number.
func ParseBudget(s string) (Budget, error) {
	var b Budget
	if strings.TrimSpace(s) == "" {
		return b, fmt.Errorf("empty budget: want key=value pairs among %s", strings.Join(resourceKeys[:], ", "))
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return b, fmt.Errorf("%q: want key=value", kv)
		}
		r := Resource(-1)
		for i, name := range resourceKeys {
			if name == k {
				r = Resource(i)
			}
		}
		if r < 0 {
			return b, fmt.Errorf("unknown key %q: want one of %s", k, strings.Join(resourceKeys[:], ", "))
		}
		mult := uint64(1)
		if r.isBytes() && v != "" {
			switch v[len(v)-1] {
			case 'K', 'k':
				mult = 1 << 10
			case 'M', 'm':
				mult = 1 << 20
			case 'G', 'g':
				mult = 1 << 30
			}
			if mult != 1 {
				v = v[:len(v)-1]
			}
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 || n > ^uint64(0)/mult {
			return b, fmt.Errorf("%s=%s: want a positive number", k, kv[strings.IndexByte(kv, '=')+1:])
		}
		b[r] = n * mult
	}
	return b, nil
}

// Host is what the machine gives the daemon, from which the default
// budgets follow.
type Host struct {
	MaxMapCount uint64 // vm.max_map_count
	NoFile      uint64 // RLIMIT_NOFILE's soft limit
	MemTotal    uint64 // bytes of memory (MemTotal)
}

// ReadHost reads the host's limits from /proc and getrlimit; what cannot
// be read takes the kernel's usual value (65530 mappings, 1024
// descriptors, 4 GiB).
func ReadHost() Host {
	h := Host{MaxMapCount: 65530, NoFile: 1024, MemTotal: 4 << 30}
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
			h.MaxMapCount = n
		}
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 {
		h.NoFile = rl.Cur
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				if kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil && kb > 0 {
					h.MemTotal = kb << 10
				}
			}
		}
		f.Close()
	}
	return h
}

// RaiseNoFile raises RLIMIT_NOFILE's soft limit to its hard limit, so
// that the descriptor budget can follow what the service was given.
func RaiseNoFile() error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err)
	}
	if rl.Cur >= rl.Max {
		return nil
	}
	rl.Cur = rl.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("setrlimit(RLIMIT_NOFILE, %d): %w", rl.Max, err)
	}
	return nil
}

// The reserves and fractions of the default budgets (the flags' help
// says them).
const (
	// MapsReserve is the mappings left to the Go runtime (heap arenas,
	// thread stacks) and the devices (XDP rings and UMEMs): at least
	// this, or an eighth of vm.max_map_count when that is more.
	MapsReserve = 8192
	// FDsReserve is the descriptors left for accepting, the devices, the
	// metrics server and the descriptors a request holds for a moment:
	// at least this, or a sixteenth of RLIMIT_NOFILE when that is more.
	FDsReserve = 256
	// MaxConns caps the default total of connections (each costs the
	// daemon goroutines and buffers besides its descriptors).
	MaxConns = 16384
	// MaxQPs caps the default total of QPs (the engine's QPN space is
	// roce.MaxQP).
	MaxQPs = 65536
	// UserShare is the part of each total one uid may hold by default.
	UserShare = 4
)

// DefaultTotal is the daemon-wide budget on host h: mappings are
// vm.max_map_count less MapsReserve, descriptors RLIMIT_NOFILE less
// FDsReserve, connections a quarter of the descriptors (at most
// MaxConns), QPs at most MaxQPs, MRs as many as mappings, queue memory a
// quarter of MemTotal and registered memory half of it.
func DefaultTotal(h Host) Budget {
	var b Budget
	mapsRes := max(uint64(MapsReserve), h.MaxMapCount/8)
	if h.MaxMapCount > 2*mapsRes {
		b[ResMaps] = h.MaxMapCount - mapsRes
	} else {
		b[ResMaps] = max(h.MaxMapCount/2, 1)
	}
	fdsRes := max(uint64(FDsReserve), h.NoFile/16)
	if h.NoFile > 2*fdsRes {
		b[ResFDs] = h.NoFile - fdsRes
	} else {
		b[ResFDs] = max(h.NoFile/2, 1)
	}
	b[ResConns] = max(min(b[ResFDs]/4, MaxConns), 1)
	b[ResQPs] = min(b[ResFDs], MaxQPs)
	b[ResMRs] = b[ResMaps]
	b[ResQueueBytes] = max(h.MemTotal/4&^(1<<20-1), 1<<20)
	b[ResRegBytes] = max(h.MemTotal/2&^(1<<20-1), 1<<20)
	return b
}

// DefaultUser is the per-uid budget under total: a UserShare-th of each
// entry, so that one user never takes everything.
func DefaultUser(total Budget) Budget {
	var b Budget
	for r := range b {
		b[r] = max(total[r]/UserShare, 1)
		if Resource(r).isBytes() && b[r] > 1<<20 {
			b[r] &^= 1<<20 - 1 // whole MiB
		}
	}
	return b
}

// cost is what one object holds of each resource.
type cost = Budget

// BudgetStats are the budgets' counters and usage.
type BudgetStats struct {
	User, Total    Budget // the budgets
	Used           Budget // what clients hold now, all uids together
	Refused        Budget // requests (and connections, under ResConns) refused per resource
	ConnsRefused   uint64 // connections closed after accept for a budget
	AcceptRetries  uint64 // accepts that failed and were retried
	Users          int    // uids holding something now
	CleanupRemains uint64 // charges a departing connection had not released (0 unless a bug)
}

// budgets accounts what every uid holds against the per-uid and total
// budgets.
type budgets struct {
	user, total Budget
	log         *slog.Logger
	clock       roce.Clock // the daemon's (Options.Clock)

	mu      sync.Mutex
	used    Budget
	byUID   map[uint32]*Budget
	refused Budget
	warned  map[uint32]*warnState

	connsRefused   atomic.Uint64
	acceptRetries  atomic.Uint64
	cleanupRemains atomic.Uint64
}

// warnState rate-limits one uid's warnings.
type warnState struct {
	last       monotime.Time // on the daemon's clock
	logged     bool          // last is set
	suppressed int
}

// noUID keys the warnings that are no uid's (accept failing).
const noUID = ^uint32(0)

// warnEvery is how often one uid's budget warnings are logged; those in
// between are counted and the count told with the next.
const warnEvery = 10 * time.Second

func newBudgets(user, total Budget, log *slog.Logger, clock roce.Clock) *budgets {
	return &budgets{user: user, total: total, log: log, clock: clock, byUID: map[uint32]*Budget{}, warned: map[uint32]*warnState{}}
}

// charge takes k for uid if both uid's and the daemon's budgets have room
// for all of it, else nothing: the error is the errno of the first
// resource short.
func (b *budgets) charge(uid uint32, k cost) error {
	b.mu.Lock()
	u := b.byUID[uid]
	if u == nil {
		u = &Budget{}
	}
	for r := Resource(0); r < numResources; r++ {
		n := k[r]
		if n == 0 {
			continue
		}
		scope, limit := "", uint64(0)
		switch {
		case u[r]+n > b.user[r] || u[r]+n < u[r]:
			scope, limit = "user", b.user[r]
		case b.used[r]+n > b.total[r] || b.used[r]+n < b.used[r]:
			scope, limit = "daemon", b.total[r]
		}
		if scope != "" {
			b.refused[r]++
			b.mu.Unlock()
			b.warn(uid, "budget reached", "resource", r.String(), "of", scope, "limit", limit)
			return fmt.Errorf("the %s budget of %s (%d) is reached: %w", scope, r, limit, r.errno())
		}
	}
	for r := range k {
		u[r] += k[r]
		b.used[r] += k[r]
	}
	b.byUID[uid] = u
	b.mu.Unlock()
	return nil
}

// force takes k for uid whatever the budgets say: for what the engine
// turned out to hold after the fact.
func (b *budgets) force(uid uint32, k cost) {
	b.mu.Lock()
	u := b.byUID[uid]
	if u == nil {
		u = &Budget{}
		b.byUID[uid] = u
	}
	for r := range k {
		u[r] += k[r]
		b.used[r] += k[r]
	}
	b.mu.Unlock()
}

// release gives back k that uid held.
func (b *budgets) release(uid uint32, k cost) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.byUID[uid]
	if u == nil {
		b.log.Error("releasing a budget charge nobody holds", "uid", uid, "charge", k.String())
		return
	}
	zero := true
	for r := range k {
		if k[r] > u[r] || k[r] > b.used[r] {
			b.log.Error("releasing more than was charged", "uid", uid, "resource", Resource(r).String(), "held", u[r], "release", k[r])
			k[r] = min(u[r], b.used[r])
		}
		u[r] -= k[r]
		b.used[r] -= k[r]
		if u[r] != 0 {
			zero = false
		}
	}
	if zero {
		delete(b.byUID, uid)
	}
}

// warn logs msg for uid at most once per warnEvery, telling how many were
// suppressed since the last.
func (b *budgets) warn(uid uint32, msg string, args ...any) {
	now := b.clock.Now()
	b.mu.Lock()
	w := b.warned[uid]
	if w == nil {
		if len(b.warned) > 4096 {
			// Forget old uids rather than grow without bound.
			for u, o := range b.warned {
				if now.Sub(o.last) > warnEvery {
					delete(b.warned, u)
				}
			}
		}
		w = &warnState{}
		b.warned[uid] = w
	}
	if w.logged && now.Sub(w.last) < warnEvery {
		w.suppressed++
		b.mu.Unlock()
		return
	}
	n := w.suppressed
	w.last, w.logged, w.suppressed = now, true, 0
	b.mu.Unlock()
	if uid != noUID {
		args = append([]any{"uid", uid}, args...)
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	b.log.Warn(msg, args...)
}

func (b *budgets) stats() BudgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetStats{User: b.user, Total: b.total, Used: b.used, Refused: b.refused, Users: len(b.byUID),
		ConnsRefused: b.connsRefused.Load(), AcceptRetries: b.acceptRetries.Load(), CleanupRemains: b.cleanupRemains.Load()}
}

// Budgets returns the budgets' counters and what clients hold now.
func (s *Server) Budgets() BudgetStats { return s.budget.stats() }

// ResourceKeys lists the resources' keys in order (for --limit-user's
// help and metrics labels).
func ResourceKeys() []string { return append([]string(nil), resourceKeys[:]...) }

// charge takes k from the connection's uid's budget and records it as
// held by the connection.
func (c *conn) charge(k cost) error {
	if err := c.s.budget.charge(c.uid, k); err != nil {
		return err
	}
	c.addHeld(k)
	return nil
}

// force is charge without the check.
func (c *conn) force(k cost) {
	c.s.budget.force(c.uid, k)
	c.addHeld(k)
}

func (c *conn) addHeld(k cost) {
	c.heldMu.Lock()
	for r := range k {
		c.held[r] += k[r]
	}
	c.heldMu.Unlock()
}

// release gives k back.
func (c *conn) release(k cost) {
	c.heldMu.Lock()
	for r := range k {
		c.held[r] -= k[r]
	}
	c.heldMu.Unlock()
	c.s.budget.release(c.uid, k)
}

// releaseRest gives back what the connection still holds after its
// cleanup released each object's charge: nothing, unless an object's
// release was missed (logged and counted).
func (c *conn) releaseRest() {
	c.heldMu.Lock()
	k := c.held
	c.held = cost{}
	c.heldMu.Unlock()
	if k == (cost{}) {
		return
	}
	c.s.budget.cleanupRemains.Add(1)
	c.s.log.Error("a departed client's budget charges were not all released", "client", c.id, "uid", c.uid, "rest", k.String())
	c.s.budget.release(c.uid, k)
}

// one returns a cost of n of resource r.
func one(r Resource, n uint64) cost {
	var k cost
	k[r] = n
	return k
}

// shmCost is the cost of a shared memory of size bytes: its memfd, its
// mapping and its pages.
func shmCost(size int) cost {
	var k cost
	k[ResFDs], k[ResMaps], k[ResQueueBytes] = 1, 1, uint64(pageRound(size))
	return k
}

// pageRound rounds n up to whole pages.
func pageRound(n int) int { return (n + pageSize - 1) &^ (pageSize - 1) }

// add returns a+b.
func add(a, b cost) cost {
	for r := range a {
		a[r] += b[r]
	}
	return a
}

// recharge turns the charge held turns into want: it takes what want has
// more (which may be refused: held stays) and gives back what it has
// less. It returns the charge now held.
func (c *conn) recharge(held, want cost) (cost, error) {
	more, less := difference(held, want)
	if err := c.charge(more); err != nil {
		return held, err
	}
	c.release(less)
	return want, nil
}

// rechargeForce is recharge for a change already made: what want has
// more is taken whatever the budgets say.
func (c *conn) rechargeForce(held, want cost) cost {
	more, less := difference(held, want)
	c.force(more)
	c.release(less)
	return want
}

// difference returns what want has more than held, and less.
func difference(held, want cost) (more, less cost) {
	for r := range held {
		if want[r] > held[r] {
			more[r] = want[r] - held[r]
		} else {
			less[r] = held[r] - want[r]
		}
	}
	return more, less
}
