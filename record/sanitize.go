package record

import "github.com/tokentop/tokentop/sanitize"

// inert makes every string in a decoded event or header safe to display
// (sanitize.Text), without the userinfo of a URL it quotes, in place; v is
// a pointer. A recording is a file anyone
// may hand over, and one written before tokentop sanitized at the network
// boundary holds server text raw; sanitizing an already clean string
// changes nothing, so a recent recording replays exactly as it was
// recorded. sanitize.Walk goes by reflection, which keeps this true of
// fields added later. A recording made before every message was built
// from a redacted URL quotes the target's user (net/http's errors do).
func inert(v any) { sanitize.Walk(v, inertText) }

func inertText(s string) string { return sanitize.Text(sanitize.Userinfo(s)) }
