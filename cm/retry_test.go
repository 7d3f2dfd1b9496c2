package cm

import (
	"testing"
	"time"

	"github.com/sroce/sroce/monotime"
)

func TestRetry(t *testing.T) {
	var r Retry
	if r.Active() || r.Poll(1<<40) != RetryNone {
		t.Fatal("the zero Retry is not idle")
	}
	wait := ResponseWait(14, 20)
	start := monotime.Time(1000)
	r.Start(start, wait, 2)
	now := start
	var got []RetryAction
	var at []time.Duration
	for step := 0; step < 100 && r.Active(); step++ {
		now = now.Add(wait / 4)
		if a := r.Poll(now); a != RetryNone {
			got = append(got, a)
			at = append(at, now.Sub(start))
		}
	}
	want := []RetryAction{RetryResend, RetryResend, RetryTimeout}
	if len(got) != len(want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] || at[i] != time.Duration(i+1)*wait {
			t.Errorf("action %d: %v at %v, want %v at %v", i, got[i], at[i], want[i], time.Duration(i+1)*wait)
		}
	}
	if r.Active() || r.Poll(now.Add(time.Hour)) != RetryNone {
		t.Error("Retry still active after its timeout")
	}

	// An MRA pushes the deadline out; the answer stops the schedule.
	r.Start(start, wait, 15)
	long := MRAWait(14, 24)
	r.Extend(start.Add(wait/2), long)
	if r.Poll(start.Add(wait)) != RetryNone || r.Deadline() != start.Add(wait/2+long) {
		t.Errorf("after MRA: deadline %v", r.Deadline())
	}
	if r.Poll(r.Deadline()) != RetryResend || r.Left() != 14 {
		t.Errorf("after the MRA wait: %d left", r.Left())
	}
	r.Stop()
	if r.Active() || r.Poll(r.Deadline().Add(long)) != RetryNone {
		t.Error("stopped Retry still due")
	}
	r.Extend(start, long)
	if r.Active() {
		t.Error("Extend armed a stopped Retry")
	}
}
