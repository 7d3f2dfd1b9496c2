// Command sroce is the command-line front end of sroce, a user-space RoCEv2
// engine. It is a set of subcommands:
//
//	sroce <command> [flags] [arguments]
//
// Run "sroce help" for the list of commands and "sroce help <command>" (or
// "sroce <command> --help") for the flags of one; "sroce version" (or
// --version after any command) prints the version.
//
// Every command parses its command line the same way, GNU style as
// perftest's tools do (package internal/cli): short flags with one dash
// ("-d eth0", "-deth0", switches bundled as "-lv"), long ones with two
// ("--device eth0", "--device=eth0", or an unambiguous prefix such as
// "--dev"), flags and arguments in any order, "--" ends the flags. A bad
// flag or value is named as it was typed, with the usage, on standard
// error; help goes to standard output. docs/cli.md says more.
//
// Adding a command takes one file and one line: the file defines a function
// with the signature of command.run, and the line adds the command to the
// commands table below.
//
// Exit status, the same for every command:
//
//	0    all went well
//	1    the command ran and failed or found a problem: a file that cannot
//	     be read or is damaged, a device or daemon that cannot be
//	     reached, a failed transfer, bad packets in a capture
//	2    bad command line: unknown flag, bad value, missing or extra
//	     arguments, a bad SROCE_* variable; nothing was done, the usage
//	     is on standard error
//	126  sroce run: the program was found but could not be started
//	127  sroce run: the program was not found
//	128+N  ended by signal N (sroce run passes on its program's; sroce
//	     demo's cleanup after SIGINT gives 130)
//
// "sroce run" otherwise exits with its program's status.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/sroce/sroce/internal/cli"
)

// Exit statuses shared by all commands (the table above).
const (
	exitOK      = cli.ExitOK      // everything went well
	exitProblem = cli.ExitProblem // the command ran and failed or found a problem
	exitUsage   = cli.ExitUsage   // bad command line: nothing was done
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
	{"version", "print the version of sroce", runVersion},
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
		fmt.Fprintf(e.Stderr, "sroce: no command given\n\n")
		usage(e.Stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "--help":
		usage(e.Stdout)
		return exitOK
	case "--version":
		return cli.Version(e.Stdout)
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
	return c.run(e, []string{"--help"})
}

const versionAbout = `
Version prints one line: the module version of sroce (v1.2.3, or (devel)
for a build from a work tree), the VCS revision it was built from (with
+dirty when the tree had changes), the commit time and the Go toolchain.
Every command prints the same line with --version.`

// runVersion implements "sroce version".
func runVersion(e *env, args []string) int {
	f := newFlags(e, "version", "sroce version", versionAbout)
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 0 {
		return f.usageError("version takes no arguments")
	}
	return cli.Version(e.Stdout)
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
	b.WriteString("\nRun \"sroce help <command>\" for the flags of a command, \"sroce --version\" for the version.\n")
	b.WriteString("SROCE_CPUPROFILE=FILE makes any command write a CPU profile (go tool pprof) to FILE.\n")
	io.WriteString(w, b.String())
}

// cmdFlags is the flag set of one command together with its usage text.
// Flags are declared with the methods of cli.FlagSet: String, Int, Bool,
// Uint64, Duration, Float64, Var and their ...Var forms, with the long
// name (or one letter for a short-only flag); Short gives a flag its
// one-letter form and Alias a second long name.
type cmdFlags struct {
	*cli.FlagSet
	e     *env
	usage cli.Usage
}

// newFlags returns an empty flag set for the command name. synopsis is
// the usage line ("sroce dissect [--json] FILE"), about a paragraph or
// more on what the command does.
func newFlags(e *env, name, synopsis, about string) *cmdFlags {
	return &cmdFlags{FlagSet: cli.NewFlagSet(), e: e,
		usage: cli.Usage{Name: "sroce " + name, Synopsis: synopsis, About: about}}
}

// Name returns the command as typed: "sroce dissect".
func (f *cmdFlags) Name() string { return f.usage.Name }

// printUsage writes the command's usage to w: the synopsis, the description
// when long is true, and the flags.
func (f *cmdFlags) printUsage(w io.Writer, long bool) {
	f.usage.Flags = f.Help()
	f.usage.Write(w, long)
}

// parse parses args and returns the positional arguments, GNU style (see
// package cli): flags may come before or after positional arguments
// ("sroce dissect FILE --json"), a lone "-" is a positional argument and
// "--" ends the flags. With -h or --help it prints the usage on stdout and
// with --version the version, and returns status exitOK; on a bad flag or
// value it prints the error and the usage on stderr and returns exitUsage.
// ok is false in these cases: the caller returns status without running.
func (f *cmdFlags) parse(args []string) (pos []string, status int, ok bool) {
	pos, err := f.Parse(args)
	switch {
	case errors.Is(err, cli.ErrHelp):
		f.printUsage(f.e.Stdout, true)
		return nil, exitOK, false
	case errors.Is(err, cli.ErrVersion):
		return nil, cli.Version(f.e.Stdout), false
	case err != nil:
		return nil, f.usageError(err.Error()), false
	}
	return pos, exitOK, true
}

// usageError reports a bad command line: msg, then the command's usage,
// on stderr. It returns exitUsage.
func (f *cmdFlags) usageError(msg string) int {
	f.usage.Flags = f.Help()
	return f.usage.Fail(f.e.Stderr, msg)
}
