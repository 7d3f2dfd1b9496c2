package rxeguest

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config describes a guest to boot.
type Config struct {
	// Name is the guest's hostname and appears in error messages.
	Name string
	// IP is eth0's address with its prefix length. Zero: no address
	// (only the IPv6 link-local one, GID index 0).
	IP netip.Prefix
	// MAC of eth0. Default: 52:54:00 followed by bytes of the pid and a
	// per-process counter.
	MAC net.HardwareAddr
	// MTU of eth0 (default 1500: rxe then uses a path MTU of 1024).
	MTU int

	// Netns is an existing namespace in which qemu runs and the tap device
	// lives. Empty: Boot creates a namespace and Close deletes it.
	Netns string
	// Tap is the tap device's name inside Netns (default "tap0").
	Tap string
	// Bridge, if set, is a bridge in Netns the tap is attached to.
	Bridge string

	CPUs      int           // vCPUs (default 1; TCG runs one host thread per vCPU)
	MemoryMiB int           // default 512
	Ports     int           // agent ports, i.e. concurrent Run calls (default 4)
	Timeout   time.Duration // boot timeout (default 4 minutes)
	// Append is added to the kernel command line.
	Append string
	// Share, if set, is a host directory the guest mounts read-only on
	// SharePath (virtio 9p), e.g. to run host-built binaries in the guest.
	Share string
}

// SharePath is where a guest mounts Config.Share.
const SharePath = "/mnt/host"

// Guest is a running qemu guest with rdma_rxe device rxe0 on eth0.
type Guest struct {
	cfg     Config
	ns      *Netns // created by Boot, deleted by Close
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error

	free   chan *port
	ports  []*port
	nextID atomic.Int64

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

// Result is the outcome of a command run in the guest.
type Result struct {
	Stdout, Stderr []byte
	ExitCode       int
}

// Err returns nil if the command exited with status 0, or else an error
// that includes its status and stderr.
func (r Result) Err() error {
	if r.ExitCode == 0 {
		return nil
	}
	return &ExitError{Result: r}
}

// ExitError reports a guest command that exited non-zero.
type ExitError struct{ Result Result }

func (e *ExitError) Error() string {
	msg := strings.TrimSpace(string(e.Result.Stderr))
	if msg == "" {
		msg = strings.TrimSpace(string(e.Result.Stdout))
	}
	if len(msg) > 2000 {
		msg = "..." + msg[len(msg)-2000:]
	}
	return fmt.Sprintf("exit status %d: %s", e.Result.ExitCode, msg)
}

var guestCounter atomic.Int64

// Boot starts qemu for img as described by cfg and waits until the guest's
// agent answers (network configured, rxe0 created). The guest writes only
// to a private overlay: any number of guests can boot the same image.
// Close must be called; it is safe to call it more than once.
func Boot(ctx context.Context, img *Image, cfg Config) (g *Guest, err error) {
	fixPath()
	n := guestCounter.Add(1)
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("rxe%d", n)
	}
	if cfg.Tap == "" {
		cfg.Tap = "tap0"
	}
	if cfg.MAC == nil {
		pid := os.Getpid()
		cfg.MAC = net.HardwareAddr{0x52, 0x54, 0x00, byte(pid >> 8), byte(pid), byte(n)}
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 1
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 512
	}
	if cfg.Ports == 0 {
		cfg.Ports = 4
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 4 * time.Minute
	}
	g = &Guest{cfg: cfg, exited: make(chan struct{}), closed: make(chan struct{})}
	start := time.Now()
	defer func() {
		if err == nil {
			timing("booted guest %s in %v", cfg.Name, since(start))
		}
		if err != nil {
			err = fmt.Errorf("rxeguest: booting %s: %w%s", cfg.Name, err, g.logTail())
			g.Close()
			g = nil
		}
	}()
	reapStale()
	if g.dir, err = os.MkdirTemp("", fmt.Sprintf("%s%d-%s-", tmpPrefix, os.Getpid(), cfg.Name)); err != nil {
		return g, err
	}
	if cfg.Netns == "" {
		if g.ns, err = NewNetns(ctx); err != nil {
			return g, err
		}
		g.cfg.Netns = g.ns.Name
	}
	ns := &Netns{Name: g.cfg.Netns}
	if _, err = ns.IP(ctx, "tuntap", "add", "dev", cfg.Tap, "mode", "tap"); err != nil {
		return g, err
	}
	up := []string{"link", "set", cfg.Tap, "mtu", strconv.Itoa(cfg.MTU)}
	if cfg.Bridge != "" {
		up = append(up, "master", cfg.Bridge)
	}
	if _, err = ns.IP(ctx, append(up, "up")...); err != nil {
		return g, err
	}

	appendLine := []string{
		"root=/dev/vda", "rw", "rootfstype=ext4", "console=ttyS0", "init=/sbin/sroce-init",
		"net.ifnames=0", "panic=-1", "loglevel=4", "sroce.name=" + cfg.Name,
		"sroce.mtu=" + strconv.Itoa(cfg.MTU),
	}
	if cfg.IP.IsValid() {
		appendLine = append(appendLine, "sroce.ip="+cfg.IP.String())
	}
	if cfg.Share != "" {
		appendLine = append(appendLine, "sroce.share=sroce")
	}
	if cfg.Append != "" {
		appendLine = append(appendLine, cfg.Append)
	}
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-name", cfg.Name,
		"-accel", "tcg,thread=multi",
		"-smp", strconv.Itoa(cfg.CPUs), "-m", strconv.Itoa(cfg.MemoryMiB),
		"-kernel", img.Kernel, "-initrd", img.Initrd,
		"-append", strings.Join(appendLine, " "),
		"-drive", "file=" + img.Rootfs + ",if=virtio,format=raw,snapshot=on",
		"-netdev", "tap,id=n0,ifname=" + cfg.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=" + cfg.MAC.String() + ",romfile=",
		"-serial", "file:" + filepath.Join(g.dir, "console.log"),
		"-device", "virtio-serial-pci,id=vser0",
	}
	if cfg.Share != "" {
		args = append(args,
			"-fsdev", "local,id=share0,path="+cfg.Share+",security_model=none,readonly=on",
			"-device", "virtio-9p-pci,fsdev=share0,mount_tag=sroce")
	}
	for i := 0; i < cfg.Ports; i++ {
		args = append(args,
			"-chardev", fmt.Sprintf("socket,id=agent%d,path=%s,server=on,wait=off", i, g.sockPath(i)),
			"-device", fmt.Sprintf("virtserialport,bus=vser0.0,chardev=agent%d,name=sroce.agent.%d", i, i))
	}
	qlog, err := os.Create(filepath.Join(g.dir, "qemu.log"))
	if err != nil {
		return g, err
	}
	defer qlog.Close()
	g.cmd = exec.Command("ip", append([]string{"netns", "exec", g.cfg.Netns, "qemu-system-x86_64"}, args...)...)
	g.cmd.Stdout = qlog
	g.cmd.Stderr = qlog
	// The guest dies with the test process even when it is killed.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// TMPDIR holds qemu's snapshot overlay.
	g.cmd.Env = append(os.Environ(), "TMPDIR="+g.dir)
	if err = startCmd(g.cmd); err != nil {
		return g, err
	}
	go func() {
		g.exitErr = g.cmd.Wait()
		close(g.exited)
	}()

	bctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	g.free = make(chan *port, cfg.Ports)
	for i := 0; i < cfg.Ports; i++ {
		p, err := g.dialPort(bctx, i)
		if err != nil {
			return g, err
		}
		g.ports = append(g.ports, p)
		g.free <- p
	}
	// The agents start after eth0 and rxe0 are set up: the first answer
	// means the guest is ready.
	res, err := g.Run(bctx, "cat /run/sroce/ready && cat /sys/class/infiniband/rxe0/ports/1/gids/1")
	if err != nil {
		return g, fmt.Errorf("waiting for the guest agent: %w", err)
	}
	if err := res.Err(); err != nil {
		return g, fmt.Errorf("guest not ready: %w", err)
	}
	return g, nil
}

func (g *Guest) sockPath(i int) string { return filepath.Join(g.dir, fmt.Sprintf("agent%d.sock", i)) }

// Name returns the guest's name.
func (g *Guest) Name() string { return g.cfg.Name }

// IP returns eth0's configured address (without prefix length).
func (g *Guest) IP() netip.Addr { return g.cfg.IP.Addr() }

// Config returns the configuration the guest was booted with, defaults
// filled in.
func (g *Guest) Config() Config { return g.cfg }

// Netns returns the namespace where the guest's tap device lives.
func (g *Guest) Netns() *Netns { return &Netns{Name: g.cfg.Netns} }

// Tap returns the name of the guest's tap device (in Netns).
func (g *Guest) Tap() string { return g.cfg.Tap }

// ConsoleLog returns what the guest printed on its serial console so far.
func (g *Guest) ConsoleLog() string {
	b, _ := os.ReadFile(filepath.Join(g.dir, "console.log"))
	return string(b)
}

func (g *Guest) logTail() string {
	if g == nil || g.dir == "" {
		return ""
	}
	var b strings.Builder
	for _, f := range []string{"qemu.log", "console.log"} {
		data, err := os.ReadFile(filepath.Join(g.dir, f))
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "\n--- %s (tail) ---\n%s", f, data)
	}
	return b.String()
}

// Pause stops the guest's qemu process (SIGSTOP) for d and then lets it
// run again (SIGCONT), as a host that starves the guest of its processor
// would: the guest's clocks go on, so its timers find d passed at once,
// and frames sent to it meanwhile wait in the tap's queue (or are dropped
// when it is full). Pause returns when the guest runs again.
func (g *Guest) Pause(d time.Duration) error {
	if g.cmd == nil || g.cmd.Process == nil {
		return errors.New("rxeguest: guest not started")
	}
	select {
	case <-g.exited:
		return fmt.Errorf("rxeguest: qemu exited: %w", g.exitErr)
	default:
	}
	pgid := g.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("rxeguest: stopping qemu: %w", err)
	}
	time.Sleep(d)
	if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("rxeguest: continuing qemu: %w", err)
	}
	return nil
}

// Close kills qemu and removes the tap device and, if Boot made it, the
// namespace. It never fails half-way: every step is attempted.
func (g *Guest) Close() error {
	g.closeOnce.Do(func() {
		close(g.closed)
		var errs []error
		if g.cmd != nil && g.cmd.Process != nil {
			syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
			select {
			case <-g.exited:
			case <-time.After(30 * time.Second):
				errs = append(errs, errors.New("qemu did not exit"))
			}
		}
		for _, p := range g.ports {
			p.conn.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if g.ns != nil {
			errs = append(errs, g.ns.Close())
		} else if g.cfg.Netns != "" && g.cfg.Tap != "" {
			// Ignore "does not exist": the tap may not have been made.
			(&Netns{Name: g.cfg.Netns}).IP(ctx, "link", "del", g.cfg.Tap)
		}
		if g.dir != "" {
			errs = append(errs, os.RemoveAll(g.dir))
		}
		g.closeErr = errors.Join(errs...)
	})
	return g.closeErr
}

// port is one agent connection. At most one request is outstanding on it.
type port struct {
	conn net.Conn
	w    *bufio.Writer
	mu   sync.Mutex
	resp map[string]chan Result
	dead chan struct{}
	err  error
}

func (g *Guest) dialPort(ctx context.Context, i int) (*port, error) {
	var conn net.Conn
	for {
		var err error
		conn, err = net.Dial("unix", g.sockPath(i))
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connecting to agent port %d: %w", i, ctx.Err())
		case <-g.exited:
			return nil, fmt.Errorf("qemu exited: %w", g.exitErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	p := &port{conn: conn, w: bufio.NewWriter(conn), resp: map[string]chan Result{}, dead: make(chan struct{})}
	go p.readLoop()
	return p, nil
}

func (p *port) readLoop() {
	r := bufio.NewReaderSize(p.conn, 64<<10)
	var err error
	for {
		var line string
		line, err = r.ReadString('\n')
		if err != nil {
			break
		}
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "R" {
			continue
		}
		rc, err1 := strconv.Atoi(f[2])
		out, err2 := base64.StdEncoding.DecodeString(strings.TrimPrefix(f[3], "."))
		errb, err3 := base64.StdEncoding.DecodeString(strings.TrimPrefix(f[4], "."))
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		p.mu.Lock()
		ch := p.resp[f[1]]
		delete(p.resp, f[1])
		p.mu.Unlock()
		if ch != nil {
			ch <- Result{Stdout: out, Stderr: errb, ExitCode: rc}
		}
	}
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	close(p.dead)
}

// Run runs script with /bin/sh in the guest and returns its output and exit
// status. A non-zero exit status is not an error (see Result.Err). If ctx
// ends first, the script's process group is killed (SIGKILL) and ctx's
// error is returned. Run may be called from several goroutines; Config.Ports of them
// run at once, the others wait.
func (g *Guest) Run(ctx context.Context, script string) (Result, error) {
	var p *port
	select {
	case p = <-g.free:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-g.closed:
		return Result{}, errors.New("rxeguest: guest closed")
	case <-g.exited:
		return Result{}, fmt.Errorf("rxeguest: qemu exited: %w", g.exitErr)
	}
	id := fmt.Sprintf("r%d", g.nextID.Add(1))
	ch := make(chan Result, 1)
	p.mu.Lock()
	p.resp[id] = ch
	p.mu.Unlock()
	line := "X " + id + " " + base64.StdEncoding.EncodeToString([]byte(script)) + "\n"
	if _, err := p.w.WriteString(line); err != nil {
		return Result{}, err
	}
	if err := p.w.Flush(); err != nil {
		return Result{}, err
	}
	select {
	case res := <-ch:
		g.free <- p
		return res, nil
	case <-p.dead:
		return Result{}, fmt.Errorf("rxeguest: agent connection lost: %w", p.err)
	case <-g.exited:
		return Result{}, fmt.Errorf("rxeguest: qemu exited: %w", g.exitErr)
	case <-ctx.Done():
		// Kill the script's process group through another port and wait
		// (a little) for the agent to report it, so the command is gone
		// when Run returns; the port is reused once the report arrives.
		kctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		g.Run(kctx, killScript(id))
		select {
		case <-ch:
			g.free <- p
		case <-kctx.Done():
			go func() {
				select {
				case <-ch:
					g.free <- p
				case <-p.dead:
				case <-g.closed:
				}
			}()
		case <-p.dead:
		case <-g.closed:
		}
		return Result{}, ctx.Err()
	}
}

func killScript(id string) string {
	return fmt.Sprintf(`f=/run/sroce/agent/%s.pid
for i in $(seq 50); do
	if [ -s $f ]; then kill -9 -$(cat $f); exit 0; fi
	sleep 0.1
done
exit 1
`, id)
}

// Proc is a command started in the background with Start.
type Proc struct {
	g   *Guest
	id  string
	Pid int // pid (and process group) in the guest
}

// Start starts script with /bin/sh in the background in the guest, in a
// session of its own, and returns at once. Its stdout and stderr are kept
// in the guest until Wait returns them.
func (g *Guest) Start(ctx context.Context, script string) (*Proc, error) {
	id := fmt.Sprintf("b%d", g.nextID.Add(1))
	d := "/run/sroce/bg/" + id
	wrapper := fmt.Sprintf(`d=%s
mkdir -p $d || exit 1
printf '%%s\n' '%s' | base64 -d > $d/cmd.sh || exit 1
( setsid sh $d/cmd.sh </dev/null >$d/out 2>$d/err & echo $! > $d/pid.tmp; mv $d/pid.tmp $d/pid; wait $!; echo $? > $d/rc.tmp; mv $d/rc.tmp $d/rc ) </dev/null >/dev/null 2>&1 &
while [ ! -s $d/pid ]; do sleep 0.02; done
cat $d/pid
`, d, base64.StdEncoding.EncodeToString([]byte(script)))
	res, err := g.Run(ctx, wrapper)
	if err != nil {
		return nil, err
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("rxeguest: starting background command: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		return nil, fmt.Errorf("rxeguest: starting background command: bad pid %q", res.Stdout)
	}
	return &Proc{g: g, id: id, Pid: pid}, nil
}

// Wait waits for the command to exit and returns its output and exit
// status. If ctx ends first, Wait returns ctx's error and the command goes
// on running (see Kill).
func (p *Proc) Wait(ctx context.Context) (Result, error) {
	d := "/run/sroce/bg/" + p.id
	return p.g.Run(ctx, fmt.Sprintf(`d=%s
while [ ! -f $d/rc ]; do sleep 0.05; done
cat $d/out
cat $d/err >&2
exit $(cat $d/rc)
`, d))
}

// Exited reports whether the command has exited, without waiting.
func (p *Proc) Exited(ctx context.Context) (bool, error) {
	res, err := p.g.Run(ctx, "test -f /run/sroce/bg/"+p.id+"/rc")
	if err != nil {
		return false, err
	}
	return res.ExitCode == 0, nil
}

// Kill sends SIGKILL to the command's process group.
func (p *Proc) Kill(ctx context.Context) error {
	res, err := p.g.Run(ctx, fmt.Sprintf("kill -9 -%d 2>/dev/null; true", p.Pid))
	if err != nil {
		return err
	}
	return res.Err()
}

// WaitListening polls the guest every 100 ms until a TCP socket listens on
// port, and fails if server (which is to open it) exits first or ctx ends.
func (g *Guest) WaitListening(ctx context.Context, port int, server *Proc) error {
	for {
		res, err := g.Run(ctx, fmt.Sprintf("ss -Hltn 'sport = :%d'", port))
		if err != nil {
			return fmt.Errorf("waiting for a listener on TCP port %d in %s: %w", port, g.cfg.Name, err)
		}
		if strings.TrimSpace(string(res.Stdout)) != "" {
			return nil
		}
		if done, err := server.Exited(ctx); err != nil {
			return fmt.Errorf("waiting for a listener on TCP port %d in %s: %w", port, g.cfg.Name, err)
		} else if done {
			res, _ := server.Wait(ctx)
			return fmt.Errorf("server exited before listening: %w", res.Err())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a listener on TCP port %d in %s: %w", port, g.cfg.Name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
