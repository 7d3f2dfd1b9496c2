package roce

// SetCongestionWindow turns the QP's congestion window on (the default)
// or off. The window bounds the packets an RC requester has in flight,
// READ responses included, to what the path is seen to carry: halved on
// loss, grown on clean acknowledgements (see qp.CwndMax). Off, the
// requester keeps only the fixed limits, as rdma_rxe does; for comparison,
// and for paths known to be clean.
func (q *QP) SetCongestionWindow(on bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.qp.SetCwnd(on)
}

// CongestionWindow returns the requester's congestion window in packets,
// for diagnostics.
func (q *QP) CongestionWindow() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qp.Cwnd()
}
