package rfb

import "encoding/binary"

// Encodings (rfbproto "Encodings").
const (
	EncodingRaw  int32 = 0
	EncodingZRLE int32 = 16

	// Pseudo-encodings the client always asks for.
	EncodingDesktopSize         int32 = -223
	EncodingLastRect            int32 = -224
	EncodingQEMUExtendedKey     int32 = -258
	EncodingExtendedDesktopSize int32 = -308
)

// Client-to-server message types.
const (
	msgSetPixelFormat           = 0
	msgSetEncodings             = 2
	msgFramebufferUpdateRequest = 3
	msgKeyEvent                 = 4
	msgPointerEvent             = 5
	msgQEMU                     = 255
	qemuExtendedKeyEvent        = 0
)

// Server-to-client message types.
const (
	msgFramebufferUpdate   = 0
	msgSetColourMapEntries = 1
	msgBell                = 2
	msgServerCutText       = 3
)

// pixelFormat is the one format the client asks for, so decoding has one
// path: 32 bpp, depth 24, little-endian true colour, R<<16 | G<<8 | B. Its
// bytes on the wire are B, G, R, padding; ZRLE's CPIXELs are B, G, R.
var pixelFormat = [16]byte{
	32, 24, 0, 1, // bits-per-pixel, depth, big-endian-flag, true-colour-flag
	0, 255, 0, 255, 0, 255, // red-max, green-max, blue-max (U16)
	16, 8, 0, // red-shift, green-shift, blue-shift
	0, 0, 0, // padding
}

func setPixelFormatMsg() []byte {
	b := make([]byte, 4, 20)
	b[0] = msgSetPixelFormat
	return append(b, pixelFormat[:]...)
}

func setEncodingsMsg(encodings []int32) []byte {
	b := make([]byte, 4, 4+4*len(encodings))
	b[0] = msgSetEncodings
	binary.BigEndian.PutUint16(b[2:], uint16(len(encodings)))
	for _, e := range encodings {
		b = binary.BigEndian.AppendUint32(b, uint32(e))
	}
	return b
}

func updateRequestMsg(incremental bool, x, y, w, h int) []byte {
	b := make([]byte, 10)
	b[0] = msgFramebufferUpdateRequest
	if incremental {
		b[1] = 1
	}
	binary.BigEndian.PutUint16(b[2:], uint16(x))
	binary.BigEndian.PutUint16(b[4:], uint16(y))
	binary.BigEndian.PutUint16(b[6:], uint16(w))
	binary.BigEndian.PutUint16(b[8:], uint16(h))
	return b
}

// keyEventMsg is the plain RFB KeyEvent: down flag and keysym.
func keyEventMsg(k Key, down bool) []byte {
	b := make([]byte, 8)
	b[0] = msgKeyEvent
	if down {
		b[1] = 1
	}
	binary.BigEndian.PutUint32(b[4:], k.Keysym)
	return b
}

// extKeyEventMsg is QEMU's ExtendedKeyEvent: keysym plus XT scancode, so the
// guest gets the physical key whatever the keysym-to-key tables say.
func extKeyEventMsg(k Key, down bool) []byte {
	b := make([]byte, 12)
	b[0] = msgQEMU
	b[1] = qemuExtendedKeyEvent
	if down {
		b[3] = 1
	}
	binary.BigEndian.PutUint32(b[4:], k.Keysym)
	binary.BigEndian.PutUint32(b[8:], k.Scancode)
	return b
}

// Pointer button mask bits.
const (
	maskLeft      = 1 << 0
	maskMiddle    = 1 << 1
	maskRight     = 1 << 2
	maskWheelUp   = 1 << 3
	maskWheelDown = 1 << 4
)

func pointerEventMsg(mask uint8, x, y int) []byte {
	b := make([]byte, 6)
	b[0] = msgPointerEvent
	b[1] = mask
	binary.BigEndian.PutUint16(b[2:], uint16(x))
	binary.BigEndian.PutUint16(b[4:], uint16(y))
	return b
}
