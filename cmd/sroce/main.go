// Command sroce is the command-line front end of sroce, a user-space RoCEv2
// engine. It is a set of subcommands:
//
//	sroce <command> [flags] [arguments]
//
// Run "sroce" or "sroce -h" for the list of commands and "sroce help
// <command>" (or "sroce <command> -h") for the flags of one.
//
// Adding a command takes one file and one line: the file defines a function
// with the signature of command.run, and the line adds the command to the
// commands table below.
//
// Exit status, for every command: 0 when all went well, 1 when the command
// ran but found a problem (a bad ICRC, a failed transfer), 2 for a usage
// error or input that cannot be read at all.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
)

// Exit statuses shared by all commands.
const (
	exitOK      = 0 // everything went well
	exitProblem = 1 // the command ran and found a problem
	exitUsage   = 2 // bad command line or unreadable input
)

// env is what a command may touch of the outside world. Commands write to
// env's streams, never to os.Stdout or os.Stderr directly, so tests run them
// in-process and read what they print.
type env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// command is one entry of the commands table.
type command struct {
	name    string // what the user types after "sroce"
	summary string // one line for the command list
	// run executes the command with the arguments that follow its name and
	// returns the exit status.
	run func(e *env, args []string) int
}

// commands lists every subcommand, in the order the usage text shows them.
// To add a command, write its run function in a file of its own and add a
// line here.
var commands = []command{
	{"dissect", "decode the RoCEv2 packets of a pcap or pcapng capture", runDissect},
	{"ladder", "explain the RC traffic of a capture as a ladder per QP pair", runLadder},
	{"rc-pingpong", "ibv_rc_pingpong on a sroce device (RC SEND ping-pong)", runRCPingpong},
	{"ud-pingpong", "ibv_ud_pingpong on a sroce device (UD SEND ping-pong)", runUDPingpong},
	{"rping", "rdma-core's rping on a sroce device (RDMA CM, READ/WRITE ping-pong)", runRping},
	{"send-bw", "perftest's ib_send_bw on a sroce device (SEND bandwidth)", runSendBW},
	{"write-bw", "perftest's ib_write_bw on a sroce device (RDMA WRITE bandwidth)", runWriteBW},
	{"read-bw", "perftest's ib_read_bw on a sroce device (RDMA READ bandwidth)", runReadBW},
	{"atomic-bw", "perftest's ib_atomic_bw on a sroce device (atomics bandwidth)", runAtomicBW},
	{"send-lat", "perftest's ib_send_lat on a sroce device (SEND latency)", runSendLat},
	{"write-lat", "perftest's ib_write_lat on a sroce device (RDMA WRITE latency)", runWriteLat},
	{"read-lat", "perftest's ib_read_lat on a sroce device (RDMA READ latency)", runReadLat},
	{"atomic-lat", "perftest's ib_atomic_lat on a sroce device (atomics latency)", runAtomicLat},
	{"interop", "every sroce tool against its real counterpart on rdma_rxe, both ways: a PASS/FAIL matrix", runInterop},
	{"demo", "two sroce engines doing RDMA with each other, explained (start here)", runDemo},
	{"run", "run an unmodified verbs program on sroce's drop-in libibverbs", runRun},
	{"daemon", "serve sroce devices to other processes (the drop-in libibverbs, Go clients)", runDaemon},
	{"devinfo", "describe the sroce device on a network interface, like ibv_devinfo", runDevinfo},
	{"stat", "counters of a sroce device on a network interface", runStat},
	{"resource", "the QPs, CQs, MRs, PDs, SRQs and CM IDs a running daemon holds, by owner", runResource},
	{"trace", "attach to a running sroce device: its engine events and packets, live", runTrace},
}

// main runs the command line and exits with its status.
func main() {
	stop, err := startProfile(os.Getenv(envCPUProfile))
	if err != nil {
		fmt.Fprintf(os.Stderr, "sroce: %s: %v\n", envCPUProfile, err)
		os.Exit(exitUsage)
	}
	code := run(os.Args[1:], &env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// envCPUProfile names the environment variable that makes any command
// write a CPU profile (go tool pprof's format) to the file it names.
const envCPUProfile = "SROCE_CPUPROFILE"

// startProfile starts a CPU profile into path ("" starts none) and returns
// the function that ends it.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// run dispatches args (the command line without the program name) to a
// command and returns the exit status. It is main without os.Exit, for tests.
func run(args []string, e *env) int {
	if len(args) == 0 {
		usage(e.Stdout)
		return exitOK
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		usage(e.Stdout)
		return exitOK
	case "help":
		return runHelp(e, args[1:])
	}
	c := lookup(name)
	if c == nil {
		if strings.HasPrefix(name, "-") {
			fmt.Fprintf(e.Stderr, "sroce: flag %s given before a command\n\n", name)
		} else {
			fmt.Fprintf(e.Stderr, "sroce: unknown command %q\n\n", name)
		}
		usage(e.Stderr)
		return exitUsage
	}
	return c.run(e, args[1:])
}

// lookup returns the command called name, or nil.
func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// runHelp implements "sroce help [command]".
func runHelp(e *env, args []string) int {
	switch {
	case len(args) == 0:
		usage(e.Stdout)
		return exitOK
	case len(args) > 1:
		fmt.Fprintf(e.Stderr, "sroce help: too many arguments\n\n")
		usage(e.Stderr)
		return exitUsage
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(e.Stderr, "sroce help: unknown command %q\n\n", args[0])
		usage(e.Stderr)
		return exitUsage
	}
	return c.run(e, []string{"-h"})
}

// usage writes the program's usage text, listing the commands, to w.
func usage(w io.Writer) {
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	var b strings.Builder
	b.WriteString("sroce is a user-space RoCEv2 engine.\n\n")
	b.WriteString("usage: sroce <command> [flags] [arguments]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, c.name, c.summary)
	}
	b.WriteString("\nRun \"sroce help <command>\" for the flags of a command.\n")
	b.WriteString("SROCE_CPUPROFILE=FILE makes any command write a CPU profile (go tool pprof) to FILE.\n")
	io.WriteString(w, b.String())
}

// cmdFlags is the flag set of one command together with its usage text.
type cmdFlags struct {
	*flag.FlagSet
	e        *env
	synopsis string // e.g. "sroce dissect [--json] FILE"
	about    string // a paragraph or two on what the command does
}

// newFlags returns an empty flag set for a command. Flags are then added with
// the usual flag.FlagSet methods, and parse reads the command line.
func newFlags(e *env, name, synopsis, about string) *cmdFlags {
	fs := flag.NewFlagSet("sroce "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors and usage itself, to the right stream
	fs.Usage = func() {}
	return &cmdFlags{FlagSet: fs, e: e, synopsis: synopsis, about: about}
}

// printUsage writes the command's usage to w: the synopsis, the description
// when long is true, and the flags.
func (f *cmdFlags) printUsage(w io.Writer, long bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n", f.synopsis)
	if long {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(f.about))
	}
	first := true
	f.VisitAll(func(fl *flag.Flag) {
		if first {
			b.WriteString("\nflags:\n")
			first = false
		}
		arg, text := flag.UnquoteUsage(fl)
		name := "--" + fl.Name
		if arg != "" {
			name += " " + arg
		}
		fmt.Fprintf(&b, "  %-14s %s", name, text)
		if arg != "" && fl.DefValue != "" {
			fmt.Fprintf(&b, " (default %s)", fl.DefValue)
		}
		b.WriteByte('\n')
	})
	if !long {
		fmt.Fprintf(&b, "\nRun \"sroce help %s\" for details.\n", strings.TrimPrefix(f.Name(), "sroce "))
	}
	io.WriteString(w, b.String())
}

// parse parses args and returns the positional arguments. Flags may come
// before or after positional arguments ("sroce dissect FILE --json"); a lone
// "-" is a positional argument and "--" ends the flags. With -h it prints the
// usage on stdout and returns status exitOK; on a bad flag it prints the
// error and the usage on stderr and returns exitUsage. ok is false in both
// cases: the caller returns status without running.
func (f *cmdFlags) parse(args []string) (pos []string, status int, ok bool) {
	for {
		err := f.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			f.printUsage(f.e.Stdout, true)
			return nil, exitOK, false
		}
		if err != nil {
			fmt.Fprintf(f.e.Stderr, "%s: %v\n\n", f.Name(), err)
			f.printUsage(f.e.Stderr, false)
			return nil, exitUsage, false
		}
		rest := f.Args()
		if len(rest) == 0 {
			return pos, exitOK, true
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), exitOK, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError reports a wrong number or kind of arguments: msg, then the
// command's usage, on stderr. It returns exitUsage.
func (f *cmdFlags) usageError(msg string) int {
	fmt.Fprintf(f.e.Stderr, "%s: %s\n\n", f.Name(), msg)
	f.printUsage(f.e.Stderr, false)
	return exitUsage
}
