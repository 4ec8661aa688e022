package egress

import (
	"fmt"
	"io/fs"
	"net"

	"github.com/bcpgw/bcpgw/internal/unixsock"
)

// sock is the egress proxy's socket for internal/unixsock: its errors
// begin "socket" (Listen adds whose proxy it is), and its private
// temporary directory has a short name (a socket's path is limited to
// about 104 bytes).
var sock = unixsock.Kind{Name: "socket", InUse: ErrInUse, TempPrefix: ".e"}

// listenUnix binds a unix socket at path that is never reachable by
// another user, not even between bind and chmod (see internal/unixsock).
// A stale socket at path is replaced; a socket that answers is ErrInUse;
// anything else at path is refused and left alone.
func listenUnix(path string) (*net.UnixListener, fs.FileInfo, error) {
	return sock.Listen(path)
}

// closeUnix closes ln and removes its socket file, only if path is still
// that socket (a new proxy may have put its own there since).
func closeUnix(ln *net.UnixListener, path string, bound fs.FileInfo) error {
	if err := unixsock.Close(ln, path, bound); err != nil {
		return fmt.Errorf("egress: close %s: %w", path, err)
	}
	return nil
}
