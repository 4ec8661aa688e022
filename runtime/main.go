package runtime

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main runs h on the process's stdin and stdout and exits: the usual body
// of a runtime's main function. Before it starts, it points os.Stdout at
// stderr, so that a stray fmt.Println in runtime code lands in the log
// instead of corrupting the protocol stream. SIGINT and SIGTERM end the
// session like a shutdown message.
func Main(h Handler) {
	protocol := os.Stdout
	os.Stdout = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Stdin, protocol, h)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "[ERROR] runtime: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}
