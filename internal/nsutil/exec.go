package nsutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// Command returns a command that Start runs inside the namespace. It is
// exec.CommandContext with SIGKILL as the parent-death signal, so the
// program does not outlive this process. Run it with ns.Start (or ns.Run),
// not cmd.Start: only a process forked from a thread inside the namespace
// lives there.
func (ns *Namespace) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Start starts cmd inside the namespace: the fork happens on a thread that
// is in the namespace, and the child inherits it. Wait for it as usual.
//
// The parent-death signal set by Command fires when the forking thread
// exits; Do keeps that thread alive after a successful switch back, so in
// practice it fires when this process dies.
func (ns *Namespace) Start(cmd *exec.Cmd) error {
	return ns.Do(cmd.Start)
}

// Run starts cmd inside the namespace and waits for it.
func (ns *Namespace) Run(cmd *exec.Cmd) error {
	if err := ns.Start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// Exec runs argv inside the namespace, like `ip netns exec NAME argv...`,
// and returns its combined output. A failure (start error, non-zero exit,
// context end) is returned with the command and its output in the message.
func (ns *Namespace) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, errors.New("nsutil: Exec needs a command")
	}
	cmd := ns.Command(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := ns.Run(cmd); err != nil {
		return out.Bytes(), fmt.Errorf("nsutil: in %s: %s: %w: %s", ns.name, strings.Join(argv, " "), err,
			bytes.TrimSpace(out.Bytes()))
	}
	return out.Bytes(), nil
}
