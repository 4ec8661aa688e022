package egress

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkEgress measures the throughput of one CONNECT tunnel through
// the proxy against a direct loopback connection to the same server, in
// the same run, so that their ratio is what the proxy costs: the client
// uploads b.N chunks; the server reads them all and answers with the
// count it got, which the client checks.
//
//	go test -run '^$' -bench Egress -benchmem ./gateway/egress
func BenchmarkEgress(b *testing.B) {
	const chunk = 64 << 10
	port := tcpServer(b, func(c *net.TCPConn) {
		n, _ := io.Copy(io.Discard, c)
		binary.Write(c, binary.BigEndian, n)
	})
	dest := fmt.Sprintf("127.0.0.1:%d", port)
	upload := func(b *testing.B, c net.Conn, r io.Reader) {
		buf := make([]byte, chunk)
		b.SetBytes(chunk)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
			b.Fatal(err)
		}
		var got int64
		if err := binary.Read(r, binary.BigEndian, &got); err != nil || got != int64(b.N)*chunk {
			b.Fatalf("server got %d bytes (%v), want %d", got, err, int64(b.N)*chunk)
		}
		b.StopTimer()
		c.Close()
	}
	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("tcp", dest)
		if err != nil {
			b.Fatal(err)
		}
		upload(b, c, c)
	})
	b.Run("proxy", func(b *testing.B) {
		f := start(b, Config{}, dest)
		c, br := f.connect(dest)
		c.SetDeadline(time.Time{})
		upload(b, c, br)
		if r := f.record(); r.BytesUp != int64(b.N)*chunk {
			b.Errorf("record: %d bytes up, want %d", r.BytesUp, int64(b.N)*chunk)
		}
	})
}

// BenchmarkEgressRoundTrip measures the latency a tunnel adds to one
// small exchange (a byte each way), which is what a request-answer
// protocol feels more than throughput.
func BenchmarkEgressRoundTrip(b *testing.B) {
	dest := fmt.Sprintf("127.0.0.1:%d", echoServer(b))
	pingPong := func(b *testing.B, c net.Conn, r io.Reader) {
		buf := []byte{1}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(r, buf); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		c.Close()
	}
	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("tcp", dest)
		if err != nil {
			b.Fatal(err)
		}
		pingPong(b, c, c)
	})
	b.Run("proxy", func(b *testing.B) {
		f := start(b, Config{}, dest)
		c, br := f.connect(dest)
		c.SetDeadline(time.Time{})
		pingPong(b, c, br)
		f.record()
	})
}

// BenchmarkEgressConnect measures opening a connection: a TCP connect
// against a CONNECT through the proxy (socket, head, policy, dial, 200).
func BenchmarkEgressConnect(b *testing.B) {
	dest := fmt.Sprintf("127.0.0.1:%d", echoServer(b))
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			c, err := net.Dial("tcp", dest)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("proxy", func(b *testing.B) {
		f := start(b, Config{}, dest)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			c, _ := f.connect(dest)
			c.Close()
			f.record()
		}
	})
}
