package roce

// SetCongestionWindow turns the QP's congestion window on or off (the
// default). The window bounds the packets an RC requester has in flight,
// READ responses included, to what the path is seen to carry: halved on
// loss, grown on clean acknowledgements (see qp.CwndMax). Off, the
// requester keeps only the fixed limits, as rdma_rxe does. It is off by
// default because over real lossy links (the veth and guest tests, 2 %
// loss) a window that had shrunk could stop recovery altogether; on the
// in-memory link with a slow receiver it works as intended.
func (q *QP) SetCongestionWindow(on bool) {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	q.qp.SetCwnd(on)
}

// CongestionWindow returns the requester's congestion window in packets,
// for diagnostics.
func (q *QP) CongestionWindow() int {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	return q.qp.Cwnd()
}
