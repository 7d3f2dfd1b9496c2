package cm

// New returns an empty message for a CM attribute ID, or nil for an
// attribute this package does not decode (LAP, APR and unknown IDs).
func New(a AttrID) Message {
	switch a {
	case AttrClassPortInfo:
		return new(ClassPortInfo)
	case AttrREQ:
		return new(REQ)
	case AttrMRA:
		return new(MRA)
	case AttrREJ:
		return new(REJ)
	case AttrREP:
		return new(REP)
	case AttrRTU:
		return new(RTU)
	case AttrDREQ:
		return new(DREQ)
	case AttrDREP:
		return new(DREP)
	case AttrSIDRREQ:
		return new(SIDRREQ)
	case AttrSIDRREP:
		return new(SIDRREP)
	}
	return nil
}

// Marshal writes a whole CM MAD into mad (MADLen bytes): the header h (its
// attribute ID replaced by msg's) and msg in the data.
func Marshal(mad []byte, h Header, msg Message) error {
	if len(mad) < MADLen {
		return errAt("MAD", KindTooShort)
	}
	h.AttrID = msg.Attr()
	if err := h.Encode(MAD(mad)); err != nil {
		return err
	}
	return msg.Encode(mad[MADHeaderLen:MADLen])
}

// Send returns a new 256-byte CM MAD of method Send with transaction ID tid
// holding msg: how every CM message goes on the wire.
func Send(tid uint64, msg Message) ([]byte, error) {
	b := make([]byte, MADLen)
	if err := Marshal(b, CMHeader(MethodSend, tid, msg.Attr()), msg); err != nil {
		return nil, err
	}
	return b, nil
}

// Unmarshal checks that b is a CM MAD (ParseMAD) and decodes its header and
// its message.
func Unmarshal(b []byte) (Header, Message, error) {
	m, err := ParseMAD(b)
	if err != nil {
		return Header{}, nil, err
	}
	h := m.Header()
	msg := New(h.AttrID)
	if msg == nil {
		return h, nil, errAt("MAD attribute "+h.AttrID.String(), KindUnknownAttr)
	}
	if err := msg.Decode(m.Data()); err != nil {
		return h, nil, err
	}
	return h, msg, nil
}
