// Command sroce-hostile is a hostile client of the sroce daemon, for
// tests: each subcommand is one attack of package hostile, bounded in time
// and in count. It prints what it achieved and what the daemon refused it
// (by errno), then whether the daemon still answers.
//
//	sroce-hostile ATTACK --socket PATH --device NAME [--duration D] [--conns N] [--per-conn N] [--writers N] [--seed N]
//
// Attacks: double-read, fds, maps, memory (the four of issue 23), and the
// soak's ring, ctl, churn and flood.
//
// Exit status: 0 when the daemon still answers at the end and, for the
// exhaustion attacks (fds, maps, memory), refused or disconnected the
// attacker at least once; 2 when the daemon's socket no longer answers; 3
// when an exhaustion attack got everything it asked for; 1 for a usage
// error.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/sroce/sroce/internal/hostile"
)

var attacks = map[string]struct {
	run     func(context.Context, *hostile.Config, *hostile.Tally) error
	exhaust bool
}{
	"double-read": {hostile.DoubleRead, false},
	"fds":         {hostile.Descriptors, true},
	"maps":        {hostile.Mappings, true},
	"memory":      {hostile.Memory, true},
	"ring":        {hostile.RandomRings, false},
	"ctl":         {hostile.RandomControl, false},
	"churn":       {hostile.Churn, false},
	"flood":       {hostile.Flood, false},
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	var names []string
	for n := range attacks {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 {
		fmt.Fprintf(os.Stderr, "usage: sroce-hostile ATTACK [flags]; attacks: %s\n", strings.Join(names, ", "))
		return 1
	}
	a, ok := attacks[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "sroce-hostile: unknown attack %q; attacks: %s\n", args[0], strings.Join(names, ", "))
		return 1
	}
	fs := flag.NewFlagSet("sroce-hostile "+args[0], flag.ContinueOnError)
	cfg := &hostile.Config{}
	fs.StringVar(&cfg.Socket, "socket", "", "the daemon's unix socket")
	fs.StringVar(&cfg.Device, "device", "", "the device to open (sroce_IF)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long the attack lasts")
	fs.IntVar(&cfg.Conns, "conns", 8, "the most connections an exhaustion attack opens")
	fs.IntVar(&cfg.PerConn, "per-conn", 16384, "the most objects of each kind per connection")
	fs.IntVar(&cfg.Writers, "writers", 0, "goroutines rewriting shared memory (double-read, ring; 0: one less than the CPUs, at least one)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the random choices")
	if err := fs.Parse(args[1:]); err != nil {
		return 1
	}
	if cfg.Socket == "" || cfg.Device == "" || fs.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "sroce-hostile: give --socket and --device, and no arguments")
		return 1
	}
	start := time.Now()
	t := hostile.NewTally()
	err := a.run(context.Background(), cfg, t)
	fmt.Printf("sroce-hostile %s: %.1f s, uid %d\n%s\n", args[0], time.Since(start).Seconds(), os.Getuid(), t)
	if err == nil {
		err = hostile.Alive(cfg.Socket)
	}
	if err != nil {
		fmt.Printf("the daemon does not answer: %v\n", err)
		return 2
	}
	fmt.Println("the daemon answers")
	if a.exhaust && t.Refusals()+t.Disconnects() == 0 {
		fmt.Println("the daemon refused nothing")
		return 3
	}
	return 0
}
