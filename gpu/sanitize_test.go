package gpu

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/tokentop/tokentop/sanitize"
)

const hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\u009b"

// TestDCGMSanitizes: a dcgm-exporter's GPU name and UUID labels, and its
// status line, reach the devices and the error escaped.
func TestDCGMSanitizes(t *testing.T) {
	body := `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-` + hostile + `",modelName="H100` + hostile + `"} 50` + "\n"
	devs, err := ParseDCGM(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 {
		t.Fatalf("%d devices", len(devs))
	}
	if want := "H100" + sanitize.Text(hostile); devs[0].Name != want {
		t.Errorf("name %q, want %q", devs[0].Name, want)
	}
	if want := "GPU-" + sanitize.Text(hostile); devs[0].UUID != want {
		t.Errorf("UUID %q, want %q", devs[0].UUID, want)
	}

	// net/http's server cannot send such a reason phrase; a raw listener can.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Read(make([]byte, 4096))
		fmt.Fprintf(c, "HTTP/1.1 503 Down%s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", hostile)
	}()
	s := NewDCGMSampler("http://"+ln.Addr().String()+"/metrics", nil).Sample(context.Background())
	if s.Err == nil {
		t.Fatal("no error")
	}
	if !sanitize.Clean(s.Err.Error()) || !strings.Contains(s.Err.Error(), "Down"+sanitize.Text(hostile)) {
		t.Errorf("error %q: want the status line, escaped", s.Err)
	}
	if o := s.Observation(); !sanitize.Clean(o.Err) {
		t.Errorf("observation error %q is not sanitized", o.Err)
	}
}
