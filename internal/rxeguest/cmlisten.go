package rxeguest

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Process is a program started in the background whose end can be
// watched (a Proc, or a process of a host namespace).
type Process interface {
	Wait(ctx context.Context) (Result, error)
	Exited(ctx context.Context) (bool, error)
}

// WaitCMListening waits until an RDMA CM ID listens on port where r runs
// its scripts (as `rdma resource show cm_id` lists it), or server ends, or
// ctx is done; the error says which. name names the place in errors.
func WaitCMListening(ctx context.Context, r Runner, name string, port int, server Process) error {
	what := fmt.Sprintf("an RDMA CM listener on port %d in %s", port, name)
	want := fmt.Sprintf(":%d ", port)
	for {
		res, err := r.Run(ctx, "rdma resource show cm_id")
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		for _, line := range strings.Split(string(res.Stdout), "\n") {
			if strings.Contains(line, "LISTEN") && strings.Contains(line+" ", want) {
				return nil
			}
		}
		if done, err := server.Exited(ctx); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		} else if done {
			res, _ := server.Wait(ctx)
			return fmt.Errorf("the server exited before %s showed: %w\n%s%s", what, res.Err(), res.Stdout, res.Stderr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
