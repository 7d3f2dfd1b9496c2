package monotime

import (
	"testing"
	"time"
)

func TestArithmetic(t *testing.T) {
	t0 := Time(0).Add(5 * time.Millisecond)
	t1 := t0.Add(250 * time.Microsecond)
	if d := t1.Sub(t0); d != 250*time.Microsecond {
		t.Fatalf("t1-t0 = %v", d)
	}
	if !t0.Before(t1) || t0.After(t1) || !t1.After(t0) {
		t.Fatal("order")
	}
	if t0.Since() != 5*time.Millisecond || t0.String() != "5ms" {
		t.Fatalf("%v %s", t0.Since(), t0)
	}
	if !Time(0).IsZero() || t0.IsZero() {
		t.Fatal("IsZero")
	}
	if d := t0.Sub(t1); d != -250*time.Microsecond {
		t.Fatalf("t0-t1 = %v", d)
	}
}
