package main

// sroce run: runs an unmodified program on sroce's drop-in libibverbs and
// librdmacm.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sroce/sroce/shim"
)

const runAbout = `
Run starts PROGRAM with sroce's drop-in libibverbs.so.1 and librdmacm.so.1
in front of the system's (LD_LIBRARY_PATH), so an unmodified, dynamically
linked verbs or RDMA CM program (ibv_devinfo, ibv_rc_pingpong, perftest's
ib_* tools, rping, ucmatose, pyverbs, ...) does RDMA on the devices of a
running "sroce daemon", which also runs the connection manager. The
system libraries are never touched. The libraries used are, first match
wins: those in $SROCE_LIBDIR when it is set; those a package installed
beside this binary (/usr/bin/sroce: /usr/lib/<multiarch>/sroce), when
built from the same sources; else they are compiled from the sources
inside sroce with the system C compiler on first use and cached
(/var/cache/sroce as root, else $XDG_CACHE_HOME/sroce or ~/.cache/sroce).

Programs that read a device's GID types from sysfs rather than through
verbs (UCX does) find what a kernel RoCE v2 device shows there:
libsroce_preload.so, preloaded, answers for a sroce device's
gid_attrs/types and gid_attrs/ndevs files and passes every other open on.

--socket names the daemon's socket (it sets SROCE_SOCKET for the program);
by default the library finds the daemon as every sroce client does:
SROCE_SOCKET, else the user's own daemon if one listens, else the system
daemon at /run/sroce/sroce.sock (docs/operating.md). The
program gets sroce's standard input, output, error and signals, and sroce
exits with its status. --print-lib prints the directory of the
libraries and exits.`

// runRun implements "sroce run".
func runRun(e *env, args []string) int {
	f := newFlags(e, "run", "sroce run [--socket PATH] [--] PROGRAM [ARGS...]", runAbout)
	socket := f.String("socket", "", "the daemon's unix socket (sets SROCE_SOCKET)")
	printLib := f.Bool("print-lib", false, "print the directory of the libibverbs and librdmacm used and exit")
	// Flags stop at the program: everything after it is the program's.
	f.StopAtOperand = true
	prog, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(prog) == 0 && !*printLib {
		return f.usageError("give the program to run")
	}
	var path string
	if len(prog) > 0 {
		var err error
		if path, err = exec.LookPath(prog[0]); err != nil {
			fmt.Fprintf(e.Stderr, "sroce run: %v\n", err)
			return 127
		}
	}

	found, err := shim.Find(context.Background())
	lib := found.Dir
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce run: %v\n", err)
		return exitProblem
	}
	if *printLib {
		fmt.Fprintln(e.Stdout, lib)
		return exitOK
	}
	environ := runEnv(os.Environ(), lib, *socket)

	// Run in sroce's own place when its streams are the process's: the
	// program then has them, its signals and its exit status directly.
	if e.Stdin == os.Stdin && e.Stdout == os.Stdout && e.Stderr == os.Stderr {
		err := syscall.Exec(path, prog, environ)
		fmt.Fprintf(e.Stderr, "sroce run: starting %s: %v\n", path, err)
		return 126
	}
	return runChild(e, path, prog, environ)
}

// runEnv returns environ with lib first on LD_LIBRARY_PATH, lib's
// shim.PreloadName first in LD_PRELOAD, and SROCE_SOCKET set to socket when
// it is not empty.
func runEnv(environ []string, lib, socket string) []string {
	var out []string
	ldPath := lib
	preload := filepath.Join(lib, shim.PreloadName)
	for _, kv := range environ {
		switch {
		case strings.HasPrefix(kv, "LD_LIBRARY_PATH="):
			if old := strings.TrimPrefix(kv, "LD_LIBRARY_PATH="); old != "" {
				ldPath = lib + ":" + old
			}
		case strings.HasPrefix(kv, "LD_PRELOAD="):
			if old := strings.TrimPrefix(kv, "LD_PRELOAD="); old != "" {
				preload += ":" + old
			}
		case socket != "" && strings.HasPrefix(kv, "SROCE_SOCKET="):
		default:
			out = append(out, kv)
		}
	}
	out = append(out, "LD_LIBRARY_PATH="+ldPath, "LD_PRELOAD="+preload)
	if socket != "" {
		out = append(out, "SROCE_SOCKET="+socket)
	}
	return out
}

// runChild runs the program as a child with e's streams, passes on the
// signals sroce receives, and returns its exit status (128 + the signal's
// number when a signal ended it).
func runChild(e *env, path string, argv, environ []string) int {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args = argv
	cmd.Env = environ
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.Stdin, e.Stdout, e.Stderr
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(e.Stderr, "sroce run: starting %s: %v\n", path, err)
		return 126
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintf(e.Stderr, "sroce run: %s: %v\n", path, err)
	return exitProblem
}
