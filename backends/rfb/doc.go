// Package rfb is a VNC (RFB 3.8) client for driving a machine's console: a
// live framebuffer kept up to date by a reader goroutine, and paced keyboard
// and absolute-pointer input. It speaks over any net.Conn (a unix socket to
// QEMU's VNC server, a websocket to Proxmox's vncwebsocket) and redials by
// itself when the connection drops. *Client implements backends.Screen.
//
// The client asks for one pixel format (32 bpp, depth 24, little-endian,
// R<<16|G<<8|B), Raw and/or ZRLE, and always DesktopSize,
// ExtendedDesktopSize and QEMU's ExtendedKeyEvent. Keys go as XT scancodes
// once QEMU acknowledged ExtendedKeyEvent, as keysyms before that.
//
// What QEMU (7.2) does that a driver must know, measured here:
//
//   - Keyboard pacing: QEMU's VNC server queues key events and hands them to
//     the guest key-delay-ms apart (-vnc ...,key-delay-ms=N, default 10), so
//     typing tops out near 45 characters/s. Its input queue holds 1024 items
//     (3 per key event, about 340 events) and silently DROPS key events past
//     that: a client sending faster than key-delay-ms loses the tail of a
//     long text (a 405-character burst: 187 arrived). KeyDelay must
//     therefore be at least QEMU's key-delay-ms; DefaultKeyDelay (10 ms)
//     matches QEMU's default, which Proxmox uses. For the local backend,
//     -vnc unix:PATH,key-delay-ms=4 with KeyDelay 5 ms typed 65-85
//     characters/s intact into OVMF's UEFI shell (a polled PS/2 keyboard, the
//     worst case) and into Linux; Linux alone took key-delay-ms=1 with 2 ms
//     (~185 characters/s).
//   - QEMU lifts every held key when a VNC client disconnects; the client
//     presses the keys of an interrupted combination again after a reconnect.
//   - lock-key-sync (on by default): QEMU toggles CapsLock so that a letter
//     keysym's case comes out, judging by the Shift it saw, and NumLock so
//     that keypad keysyms come out. Letters typed under Shift therefore carry
//     upper-case keysyms, and kp_0..kp_9 carry KP_0..KP_9 (NumLock on).
//   - ctrl-alt-1..9 switch QEMU's own consoles (the guest never sees them)
//     unless the VNC display is bound to one console (-vnc ...,display=);
//     read in ui/vnc.c, not tried.
//   - QEMU answers every NON-incremental update request with an
//     ExtendedDesktopSize rect at once: the reader never answers an update
//     with one (that would loop), only the first request and FreshFrame's
//     are non-incremental (fresh.go: how a frame no older than the call is
//     had, while QEMU's refresh timer backs off to 3 s on an idle screen).
//   - A pointer move must change both axes: the guest's kernel drops a
//     tablet axis whose value did not change, so after the guest moved the
//     pointer itself a move that repeats the last y sent leaves it at the
//     guest's y (moveTo in input.go steps one pixel first).
//     QEMU marks the whole screen dirty on a resize, so incremental requests
//     get the full new frame.
//   - Before the guest draws, QEMU shows a 640x480 placeholder; SeaBIOS then
//     switches to 720x400 text, OVMF to 1280x800 graphics.
//   - In VGA text mode the emulated cursor blinks: the frame keeps changing
//     while the machine runs, so "unchanged since" never grows on a text
//     console with a cursor (stop the machine for a still frame).
//   - A wrong VNC password gets SecurityResult 1 with the reason
//     "Authentication failed" plus a NUL; -vnc ...,password-secret=ID with
//     -object secret,id=ID,data=PASSWORD works on 7.2.
package rfb
