package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/roce/memlink"
)

// TestBudgetWarningsSpacedOnTheDaemonClock: one uid's budget warnings are
// logged once per warnEvery of the daemon's clock, the ones in between
// counted and told with the next; on a virtual clock the test moves, no
// wall-clock wait decides it.
func TestBudgetWarningsSpacedOnTheDaemonClock(t *testing.T) {
	clock := new(memlink.VirtualClock)
	var buf bytes.Buffer
	b := newBudgets(Budget{}, Budget{}, slog.New(slog.NewTextHandler(&buf, nil)), clock)
	for range 3 {
		b.warn(1000, "over budget")
	}
	if n := strings.Count(buf.String(), "over budget"); n != 1 {
		t.Fatalf("%d warnings logged at one instant, want 1:\n%s", n, buf.String())
	}
	clock.Advance(warnEvery - time.Nanosecond)
	b.warn(1000, "over budget")
	if n := strings.Count(buf.String(), "over budget"); n != 1 {
		t.Fatalf("%d warnings logged within warnEvery, want 1:\n%s", n, buf.String())
	}
	clock.Advance(time.Nanosecond)
	b.warn(1000, "over budget")
	if n := strings.Count(buf.String(), "over budget"); n != 2 || !strings.Contains(buf.String(), "suppressed=3") {
		t.Fatalf("after warnEvery: want a second warning telling of the 3 suppressed:\n%s", buf.String())
	}
}
