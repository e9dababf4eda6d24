package probe

import (
	"io"
	"net"
	"testing"
)

// TestOrderConnTellsAnAnswerFromBytesAlreadyThere drives orderConn over a
// pipe in the orders a connection sees: an answer read after its request's
// first write is one; bytes read before it, or with no write at all, are
// not, whatever came before on the connection.
func TestOrderConnTellsAnAnswerFromBytesAlreadyThere(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	c := newOrderConn(client)
	go io.Copy(io.Discard, server) // the server reads whatever is written
	buf := make([]byte, 16)
	serverSays := func(s string) {
		go server.Write([]byte(s))
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	clientSays := func(s string) {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	c.beginRequest()
	if c.answeredAfterWrite() {
		t.Fatal("nothing written, nothing read: not an answer")
	}
	clientSays("request 1")
	serverSays("answer 1")
	if !c.answeredAfterWrite() {
		t.Fatal("a read after the request's first write is its answer")
	}
	clientSays("more of request 1") // a later write of the same request
	if !c.answeredAfterWrite() {
		t.Fatal("only the request's first write counts")
	}

	serverSays("smuggled") // between requests, no request outstanding
	c.beginRequest()
	if c.answeredAfterWrite() {
		t.Fatal("bytes read before the request taking the connection wrote anything are not its answer")
	}
	clientSays("request 2")
	if c.answeredAfterWrite() {
		t.Fatal("bytes read before the request's first write are not its answer")
	}
	serverSays("answer 2")
	if !c.answeredAfterWrite() {
		t.Fatal("a read after the write is")
	}
}
