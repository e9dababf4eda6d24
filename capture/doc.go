// Package capture measures every real user's request to the server from
// the host's packets, sending nothing: a pcap or pcapng file (`tcpdump
// -w`), or a live AF_PACKET socket with a kernel filter on the server's
// port, in pure Go (no cgo, no libpcap).
//
// The path of a packet: decode (link layer, IPv4/IPv6, TCP, by hand:
// layers), reassemble each direction of each connection in sequence order
// with bounded memory (assembler.go), frame HTTP/1.1 messages (heads,
// Content-Length and chunked bodies, 1xx, keep-alive, pipelining, closes
// and resets), and read a streaming completion's event stream chunk by
// chunk. Every instant is the kernel's timestamp of the packet that
// completed what it marks: the request's last byte, the response head,
// each content chunk, the end. A request emits one observe.Observed.
//
// Nothing private is kept: message heads (credentials) are read for a few
// framing fields and overwritten, a request body is scanned for its
// top-level "model" only, and chunk texts are decoded to count their bytes
// and dropped. Out-of-order, retransmitted or missing bytes mark the
// request they belong to incomplete, with the reason, rather than timing
// it from bytes the client could not yet read.
package capture
