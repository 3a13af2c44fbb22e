package live

import (
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// The hub encodes every version once, on the changelog's goroutine, with
// wire's encoder, into the frame's own buffer.

// maxFrameHeader is the longest header of an unmasked server frame.
const maxFrameHeader = 10

// versionFrame is v's version message as one websocket text frame.
func versionFrame(v *schemas.Version) ([]byte, error) {
	b := make([]byte, maxFrameHeader, maxFrameHeader+wire.VersionSize(v))
	b, err := wire.AppendVersion(b, v)
	if err != nil {
		return nil, err
	}
	return frameInPlace(b), nil
}

// frameInPlace writes the frame header for the payload b[maxFrameHeader:]
// into the space reserved before it and returns the frame.
func frameInPlace(b []byte) []byte {
	n := len(b) - maxFrameHeader
	switch {
	case n < 126:
		b[8], b[9] = 0x81, byte(n)
		return b[8:]
	case n <= 0xffff:
		b[6], b[7], b[8], b[9] = 0x81, 126, byte(n>>8), byte(n)
		return b[6:]
	default:
		b[0], b[1] = 0x81, 127
		for i := range 8 {
			b[2+i] = byte(uint64(n) >> (56 - 8*i))
		}
		return b
	}
}

// encodeVersion is the one encoding of a version message.
func encodeVersion(v *schemas.Version) ([]byte, error) { return wire.EncodeVersion(v) }
