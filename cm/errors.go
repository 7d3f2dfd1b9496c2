package cm

import "strconv"

// ErrorKind classifies what is wrong with a MAD or a CM message.
type ErrorKind uint8

// Error kinds.
const (
	KindTooShort       ErrorKind = iota + 1 // fewer bytes than the MAD or structure needs
	KindBadVersion                          // base or class version not the one this package speaks
	KindNotCM                               // management class is not CM (0x07)
	KindUnknownAttr                         // attribute ID of no CM message
	KindOutOfRange                          // a value does not fit its field (encoders)
	KindPrivateDataLen                      // private data longer than the message carries
	KindBadIPHeader                         // IP CM header: unknown version or IP version
	KindNotGSI                              // packet is not a UD SEND ONLY to QP1 with the GSI Q_Key
)

var kindText = [...]string{
	0:                  "error",
	KindTooShort:       "too short",
	KindBadVersion:     "unsupported version",
	KindNotCM:          "management class is not communication management",
	KindUnknownAttr:    "unknown attribute",
	KindOutOfRange:     "value out of range",
	KindPrivateDataLen: "private data too long",
	KindBadIPHeader:    "bad IP CM header",
	KindNotGSI:         "not a MAD for QP1",
}

// String returns the kind in words.
func (k ErrorKind) String() string {
	if int(k) < len(kindText) {
		return kindText[k]
	}
	return "error kind " + strconv.Itoa(int(k))
}

// Error is the typed error of this package: a kind, and the structure or
// field it was found in (such as "REQ local QPN" or "MAD").
type Error struct {
	Kind  ErrorKind
	Where string
}

// Error returns "cm: " followed by Reason.
func (e *Error) Error() string { return "cm: " + e.Reason() }

// Reason returns the message without the package prefix, such as
// "REQ local QPN: value out of range".
func (e *Error) Reason() string {
	if e.Where == "" {
		return e.Kind.String()
	}
	return e.Where + ": " + e.Kind.String()
}

// Is matches e against a sentinel of the same kind whose Where is empty or
// equal to e's.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Where == "" || t.Where == e.Where)
}

// Sentinels for errors.Is, one per kind.
var (
	ErrTooShort       = &Error{Kind: KindTooShort}
	ErrBadVersion     = &Error{Kind: KindBadVersion}
	ErrNotCM          = &Error{Kind: KindNotCM}
	ErrUnknownAttr    = &Error{Kind: KindUnknownAttr}
	ErrOutOfRange     = &Error{Kind: KindOutOfRange}
	ErrPrivateDataLen = &Error{Kind: KindPrivateDataLen}
	ErrBadIPHeader    = &Error{Kind: KindBadIPHeader}
	ErrNotGSI         = &Error{Kind: KindNotGSI}
)

func errAt(where string, k ErrorKind) error { return &Error{Kind: k, Where: where} }
