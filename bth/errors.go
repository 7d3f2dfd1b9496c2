package bth

// ErrorKind classifies what is wrong with a frame or header.
type ErrorKind uint8

// Error kinds. Each names one way a frame can be malformed.
const (
	KindTooShort          ErrorKind = iota + 1 // fewer bytes than the headers need
	KindNotRoCE                                // not IP/UDP to port 4791: not for us
	KindBadIPHeader                            // IP version, IHL or fragment fields are unusable
	KindIPLengthMismatch                       // IP or UDP length disagrees with the frame
	KindBadTransportVer                        // BTH TVer is not 0
	KindUnknownOpcode                          // opcode not in the table
	KindBadPadCount                            // pad count inconsistent with the length
	KindUnexpectedPayload                      // payload on an opcode that carries none, or wrong size
	KindOutOfRange                             // a value does not fit its field (encoders)
	KindBadICRC                                // invariant CRC mismatch
)

var kindText = [...]string{
	KindTooShort:          "too short",
	KindNotRoCE:           "not RoCEv2 (UDP port 4791)",
	KindBadIPHeader:       "bad IP header",
	KindIPLengthMismatch:  "IP/UDP length mismatch",
	KindBadTransportVer:   "unsupported transport version",
	KindUnknownOpcode:     "unknown opcode",
	KindBadPadCount:       "bad pad count",
	KindUnexpectedPayload: "payload length not allowed for opcode",
	KindOutOfRange:        "value out of range",
	KindBadICRC:           "ICRC mismatch",
}

// Layer names the header an error was found in.
type Layer uint8

// Layers, outermost first.
const (
	LayerAny Layer = iota
	LayerEthernet
	LayerVLAN
	LayerIPv4
	LayerIPv6
	LayerUDP
	LayerBTH
	LayerExt // extended transport headers
	LayerPayload
	LayerICRC
	numLayers
)

var layerText = [...]string{
	LayerAny:      "frame",
	LayerEthernet: "ethernet",
	LayerVLAN:     "802.1Q",
	LayerIPv4:     "ipv4",
	LayerIPv6:     "ipv6",
	LayerUDP:      "udp",
	LayerBTH:      "bth",
	LayerExt:      "extended headers",
	LayerPayload:  "payload",
	LayerICRC:     "icrc",
}

// Error is the typed error returned by parsers and encoders. Values are
// preallocated, so reporting a malformed packet never allocates. Use
// errors.Is with the Err* kind sentinels, or errors.As to read Kind and Layer.
type Error struct {
	Kind  ErrorKind
	Layer Layer
}

// Error returns "bth: " followed by Reason.
func (e *Error) Error() string {
	return "bth: " + e.Reason()
}

// Reason returns the message without the package prefix: the layer and
// what is wrong in it, such as "ipv4: bad IP header", for callers that
// print errors in a sentence of their own.
func (e *Error) Reason() string {
	return layerText[e.Layer] + ": " + kindText[e.Kind]
}

// Is matches e against a sentinel of the same kind whose layer is LayerAny
// or equal to e's.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Layer == LayerAny || t.Layer == e.Layer)
}

// Sentinels for errors.Is, one per kind.
var (
	ErrTooShort          = &Error{Kind: KindTooShort}
	ErrNotRoCE           = &Error{Kind: KindNotRoCE}
	ErrBadIPHeader       = &Error{Kind: KindBadIPHeader}
	ErrIPLengthMismatch  = &Error{Kind: KindIPLengthMismatch}
	ErrBadTransportVer   = &Error{Kind: KindBadTransportVer}
	ErrUnknownOpcode     = &Error{Kind: KindUnknownOpcode}
	ErrBadPadCount       = &Error{Kind: KindBadPadCount}
	ErrUnexpectedPayload = &Error{Kind: KindUnexpectedPayload}
	ErrOutOfRange        = &Error{Kind: KindOutOfRange}
	ErrBadICRC           = &Error{Kind: KindBadICRC}
)

var errTable [numLayers][len(kindText)]Error

func init() {
	for l := range errTable {
		for k := range errTable[l] {
			errTable[l][k] = Error{Kind: ErrorKind(k), Layer: Layer(l)}
		}
	}
}

// errAt returns the preallocated error for kind k in layer l.
func errAt(l Layer, k ErrorKind) error { return &errTable[l][k] }
