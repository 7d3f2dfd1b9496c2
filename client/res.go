package client

import (
	"encoding/json"
	"fmt"

	"github.com/sroce/sroce/daemon/ctl"
)

// Resources returns the daemon's objects of kind (QUERY_RES, what "sroce
// resource" lists), in the order of their context's number and handle,
// each as its JSON object (ctl.ResClient, ctl.ResQP, ...). It asks page
// after page over one connection; objects created or destroyed meanwhile
// may or may not be listed.
func Resources(socket string, kind ctl.ResKind) ([]json.RawMessage, error) {
	c, err := dial(socket)
	if err != nil {
		return nil, err
	}
	defer c.uc.Close()
	var out []json.RawMessage
	q := ctl.ResQuery{Kind: kind}
	for {
		b, _, err := c.call(ctl.OpQueryRes, ctl.Bytes(&q), nil)
		if err != nil {
			return nil, err
		}
		var p ctl.ResPage
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, fmt.Errorf("sroce daemon: unreadable QUERY_RES reply: %w", err)
		}
		for _, it := range p.Items {
			out = append(out, json.RawMessage(it))
		}
		if !p.More {
			return out, nil
		}
		// The cursor must move on, or the daemon would be asked the
		// same page for ever.
		if len(p.Items) == 0 || p.NextCtx < q.AfterCtx || p.NextCtx == q.AfterCtx && p.NextHandle <= q.AfterHandle {
			return nil, fmt.Errorf("sroce daemon: QUERY_RES did not advance past context %d handle %d", q.AfterCtx, q.AfterHandle)
		}
		q.AfterCtx, q.AfterHandle = p.NextCtx, p.NextHandle
	}
}
