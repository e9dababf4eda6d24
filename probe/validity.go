package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// NewValidator builds a Request.Validate function: the output must match
// pattern (when not empty) and, when requireJSON is set, parse as one JSON
// value. Classes that ask for structured output use it so that a server
// returning fast garbage does not count as good.
func NewValidator(pattern string, requireJSON bool) (func(string) error, error) {
	var re *regexp.Regexp
	if pattern != "" {
		var err error
		if re, err = regexp.Compile(pattern); err != nil {
			return nil, fmt.Errorf("validity regexp: %w", err)
		}
	}
	if re == nil && !requireJSON {
		return nil, errors.New("validity: neither a regexp nor JSON requested")
	}
	return func(text string) error {
		if requireJSON && !json.Valid([]byte(text)) {
			return errors.New("output is not valid JSON")
		}
		if re != nil && !re.MatchString(text) {
			return fmt.Errorf("output does not match %q", re.String())
		}
		return nil
	}, nil
}
