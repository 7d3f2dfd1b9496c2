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

// SetMmapFault makes every mapping of a client's memfd (REG_MR, REREG_MR)
// fail with err, as the daemon's mmap fails when it is out of mappings; a
// nil err removes the fault.
func SetMmapFault(err error) {
	if err == nil {
		mmapClientFault.Store(nil)
		return
	}
	mmapClientFault.Store(&err)
}

// HoldMRLock takes the MR lock of client id's connection, as a
// registration holds it while it maps the client's memory, until release
// is called.
func HoldMRLock(s *Server, id uint64) (release func()) {
	s.mu.Lock()
	var c *conn
	for k := range s.conns {
		if k.id == id {
			c = k
		}
	}
	s.mu.Unlock()
	if c == nil {
		return func() {}
	}
	c.mrMu.Lock()
	return c.mrMu.Unlock
}
