package roce_test

import (
	"errors"
	"testing"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// TestQPCapsAsRxe creates QPs with the caps programs ask for and checks
// what the QP gets and reports, as rdma_rxe's rxe_qp_chk_cap and
// rxe_init_sq give them: the send queue's SGEs and inline data share one
// room (the larger of the two), inline data up to 512 bytes, zero counts
// accepted, and values above the limits refused with EINVAL.
func TestQPCapsAsRxe(t *testing.T) {
	b := newBed(t, bedOpts{})
	n := b.Nodes[0]
	for _, tc := range []struct {
		ask, want verbs.QPCap
	}{
		{verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16}},
		{verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 64}, verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 4, MaxRecvSGE: 1, MaxInlineData: 64}},
		{verbs.QPCap{MaxSendWR: 8, MaxInlineData: 512}, verbs.QPCap{MaxSendWR: 8, MaxSendSGE: 32, MaxInlineData: 512}},
		{verbs.QPCap{MaxSendWR: 8, MaxSendSGE: 32, MaxRecvSGE: 32}, verbs.QPCap{MaxSendWR: 8, MaxSendSGE: 32, MaxRecvSGE: 32, MaxInlineData: 512}},
		{verbs.QPCap{}, verbs.QPCap{}},
	} {
		q, err := n.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: n.SCQ, RecvCQ: n.RCQ, Cap: tc.ask})
		if err != nil {
			t.Errorf("caps %+v: %v", tc.ask, err)
			continue
		}
		if _, ia := q.Query(); ia.Cap != tc.want {
			t.Errorf("caps %+v: got %+v, want %+v", tc.ask, ia.Cap, tc.want)
		}
		if a, _ := q.Query(); a.Cap != tc.want {
			t.Errorf("caps %+v: ibv_query_qp's caps %+v, want %+v", tc.ask, a.Cap, tc.want)
		}
		q.Destroy()
	}
	for _, c := range []verbs.QPCap{
		{MaxSendWR: roce.MaxQPWR + 1}, {MaxRecvWR: roce.MaxQPWR + 1}, {MaxSendSGE: roce.MaxSGE + 1},
		{MaxRecvSGE: roce.MaxSGE + 1}, {MaxInlineData: 513},
	} {
		if q, err := n.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: n.SCQ, RecvCQ: n.RCQ, Cap: c}); !errors.Is(err, roce.ErrInvalid) {
			t.Errorf("caps %+v: error %v, want %v", c, err, roce.ErrInvalid)
			if q != nil {
				q.Destroy()
			}
		}
	}
}
