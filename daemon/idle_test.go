package daemon_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// TestIdleCPU measures what idle opened contexts cost the daemon, when
// SROCE_IDLE_CONTEXTS asks for it (it is a measurement, not a check, and
// asserts nothing about time): it opens that many contexts on an
// in-process daemon, lets them sit for SROCE_IDLE_TIME (default 10 s) and
// logs the process's CPU time (user and system) per 10 s. The clients are
// in the same process but idle: the CPU is the daemon's. With
// SROCE_IDLE_STUCK it then adds that many contexts whose QP has more
// receives posted than the engine's queue holds, and measures again.
func TestIdleCPU(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("SROCE_IDLE_CONTEXTS"))
	if err != nil {
		t.Skip("a measurement: set SROCE_IDLE_CONTEXTS to the number of idle contexts to open")
	}
	period := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SROCE_IDLE_TIME")); err == nil {
		period = d
	}
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	lim.Cur = lim.Max
	unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	// The contexts are one uid's: the measurement raises its budgets of
	// connections and descriptors to what it opens.
	var user, total daemon.Budget
	user[daemon.ResConns], total[daemon.ResConns] = uint64(2*n+64), uint64(2*n+64)
	user[daemon.ResFDs], total[daemon.ResFDs] = uint64(8*n+256), uint64(8*n+256)
	r := newRig(t, daemon.Options{User: user, Total: total})
	cpu := func() time.Duration {
		var ru unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	idle := func(what string) {
		time.Sleep(time.Second) // let what opening started settle
		c0, w0 := cpu(), time.Now()
		time.Sleep(period) // wall clock: measures CPU use over real time
		used, wall := cpu()-c0, time.Since(w0)
		t.Logf("%s: %.3f CPU-s per 10 s", what, used.Seconds()*10/wall.Seconds())
	}
	idle("no context")
	for i := 0; i < n; i++ {
		x, err := client.Open(r.socket, "sroce_mem0")
		if err != nil {
			t.Fatalf("opening context %d: %v", i, err)
		}
		defer x.Close()
	}
	idle(strconv.Itoa(n) + " idle contexts")
	// Contexts whose QP has more receives posted than the engine's queue
	// holds, and no message coming: the bridge cannot move the rest.
	stuck, _ := strconv.Atoi(os.Getenv("SROCE_IDLE_STUCK"))
	for i := 0; i < stuck; i++ {
		e := newEndpoint(t, r, "sroce_mem0", false)
		connect(t, e, e.qp.QPN(), r.gids[0])
		wr := &verbs.RecvWR{SGL: []mr.SGE{{Addr: e.buf.Addr(0), Length: 64, LKey: e.mr.LKey()}}}
		for e.qp.PostRecv(wr) == nil {
		}
		// The bridge moves what the engine takes; the rest waits.
		waitFor(t, "room in the receive ring", func() bool { return e.qp.PostRecv(wr) == nil })
		for e.qp.PostRecv(wr) == nil {
		}
	}
	if stuck > 0 {
		idle(strconv.Itoa(n) + " idle contexts and " + strconv.Itoa(stuck) + " with receives the engine cannot take")
	}
}
