package fdtest

import "syscall"

// SmallReceiveWindow is a net.Dialer Control that sets the socket's
// receive buffer to n bytes before it connects (so that the TCP window is
// small from the start): a caller that then reads nothing holds the
// server's writer within a few kilobytes, as a slow client does.
func SmallReceiveWindow(n int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
		}); cerr != nil {
			return cerr
		}
		return err
	}
}
