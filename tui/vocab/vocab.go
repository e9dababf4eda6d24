// Package vocab is the key vocabulary the two consoles share, the single
// server's (tui) and the fleet's (fleet): a key means one thing in both.
// q and ctrl+c quit, ↑ and ↓ move the selection, esc goes back. Each
// console builds these bindings here and adds its own help words; a key
// one console gives a meaning of its own is left unbound in the other (k
// is the demo's simulator knobs, so the fleet console moves with ↑/↓ only,
// not k/j; backspace deletes in the single-server console's text lines, so
// the fleet console does not go back with it).
package vocab

import "github.com/charmbracelet/bubbles/key"

// Quit ends the console.
func Quit(opts ...key.BindingOpt) key.Binding { return bind([]string{"q", "ctrl+c"}, opts) }

// Up moves the selection up a row.
func Up(opts ...key.BindingOpt) key.Binding { return bind([]string{"up"}, opts) }

// Down moves the selection down a row.
func Down(opts ...key.BindingOpt) key.Binding { return bind([]string{"down"}, opts) }

// Back leaves the innermost view.
func Back(opts ...key.BindingOpt) key.Binding { return bind([]string{"esc"}, opts) }

func bind(keys []string, opts []key.BindingOpt) key.Binding {
	return key.NewBinding(append([]key.BindingOpt{key.WithKeys(keys...)}, opts...)...)
}
