// Package monotime is the engine's notion of an instant: a reading of a
// monotonic clock, in nanoseconds since an arbitrary epoch. It is a type
// of its own so that instants and spans (time.Duration) cannot be mixed
// up: an instant plus a span is an instant (Add), an instant minus an
// instant is a span (Sub), and adding two instants does not compile.
//
// The QP logic reads no clock: the device passes it the time as a Time,
// which in tests comes from a virtual clock.
package monotime

import "time"

// Time is an instant on a monotonic clock, in nanoseconds since the
// clock's epoch. The zero Time is the epoch itself; code that needs "no
// instant" says so with a separate flag or documents that it uses zero.
type Time int64

// Add returns t + d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns the span t - u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Before reports whether t is before u.
func (t Time) Before(u Time) bool { return t < u }

// After reports whether t is after u.
func (t Time) After(u Time) bool { return t > u }

// IsZero reports whether t is the epoch.
func (t Time) IsZero() bool { return t == 0 }

// Since returns the span from the epoch to t.
func (t Time) Since() time.Duration { return time.Duration(t) }

// String formats t as the span since the epoch ("1.5ms").
func (t Time) String() string { return time.Duration(t).String() }
