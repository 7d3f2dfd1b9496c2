package daemon

// One daemon per interface: a daemon serving an interface binds an
// abstract unix socket named after it ("@sroce/iface/<ifindex>", or
// "@sroce/iface/<ifindex>/<address>" for a UDP link bound to one address
// of it). Abstract names live in the network namespace, as interfaces do;
// the kernel frees the name when the daemon exits, however it exits. A
// second daemon finds the name taken (EADDRINUSE), connects to it and
// names the holder: its pid (SO_PEERCRED) and the socket it serves on,
// which the holder writes to whoever connects.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Claim is a daemon's hold on one interface (ClaimInterface).
type Claim struct {
	ln     *net.UnixListener
	mu     sync.Mutex
	socket string
	done   chan struct{}
}

// ErrClaimed is wrapped by ClaimInterface's error when another daemon
// serves the interface.
var ErrClaimed = errors.New("the interface is served by another sroce daemon")

// claimedError is the sentence naming the holder; it matches ErrClaimed.
type claimedError struct{ msg string }

func (e *claimedError) Error() string { return e.msg }
func (e *claimedError) Unwrap() error { return ErrClaimed }

// claimName is the abstract name of an interface's claim.
func claimName(ifindex int, addr netip.Addr) string {
	if addr.IsValid() {
		return fmt.Sprintf("@sroce/iface/%d/%s", ifindex, addr)
	}
	return fmt.Sprintf("@sroce/iface/%d", ifindex)
}

// ClaimInterface claims interface ifname (by its index, in the calling
// thread's network namespace) for this process; with addr, only that
// address of it (a UDP link bound to it). When another daemon holds it,
// the error (wrapping ErrClaimed) is a sentence naming the holder's pid
// and socket.
func ClaimInterface(ifname string, addr netip.Addr) (*Claim, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	name := claimName(ifc.Index, addr)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if errors.Is(err, unix.EADDRINUSE) {
		what := "interface " + ifname
		if addr.IsValid() {
			what += " at " + addr.String()
		}
		return nil, &claimedError{fmt.Sprintf("%s is already served by another sroce daemon (%s); stop that one first, or serve another interface",
			what, describeClaim(name))}
	}
	if err != nil {
		return nil, fmt.Errorf("claiming interface %s (%s): %w", ifname, name, err)
	}
	c := &Claim{ln: ln, done: make(chan struct{})}
	go c.serve()
	return c, nil
}

// SetSocket records the socket the daemon serves on, which the claim
// tells a daemon that finds the interface taken.
func (c *Claim) SetSocket(path string) {
	c.mu.Lock()
	c.socket = path
	c.mu.Unlock()
}

// serve answers each connection with the socket path and closes it.
func (c *Claim) serve() {
	defer close(c.done)
	for {
		uc, err := c.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c.mu.Lock()
		s := c.socket
		c.mu.Unlock()
		if s == "" {
			s = "(not listening yet)"
		}
		uc.SetWriteDeadline(time.Now().Add(time.Second))
		uc.Write([]byte(s + "\n"))
		uc.Close()
	}
}

// Release lets the interface go.
func (c *Claim) Release() {
	if c == nil {
		return
	}
	c.ln.Close()
	<-c.done
}

// describeClaim names the holder of an abstract claim: "pid N (comm),
// socket PATH", or what could be learnt.
func describeClaim(name string) string {
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return "its pid unknown: " + err.Error()
	}
	defer uc.Close()
	who := strings.TrimPrefix(peerName(uc), ", ")
	if who == "" {
		who = "pid unknown"
	}
	uc.SetReadDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(uc).ReadString('\n')
	if err != nil {
		return who
	}
	return who + ", socket " + strings.TrimSpace(line)
}
