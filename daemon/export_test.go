package daemon

// SetPanicHook makes f run at the points of a connection's work where a
// test may inject a panic ("request": before each request is handled,
// "bridge": when the bridge serves a QP), with the client's id as
// Clients reports it. A nil f removes the hook.
func SetPanicHook(f func(client uint64, where string)) {
	if f == nil {
		panicHook.Store(nil)
		return
	}
	h := func(c *conn, where string) { f(c.id, where) }
	panicHook.Store(&h)
}
