package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	sigsjson "sigs.k8s.io/json"
)

// decodeStrict is the one JSON decoder of every annotation: at most limit
// bytes; one JSON value with nothing after it; no unknown, duplicate or
// case-mismatched fields (sigs.k8s.io/json, the decoder Kubernetes' own
// strict API decoding uses).
func decodeStrict(s string, limit int, into any) error {
	if len(s) > limit {
		return fmt.Errorf("%d bytes, limit %d", len(s), limit)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	strict, err := sigsjson.UnmarshalStrict(raw, into, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("JSON: %w", err)
	}
	if len(strict) > 0 {
		return fmt.Errorf("JSON: %w", errors.Join(strict...))
	}
	return nil
}

// decodeContainerObject reads a {"<container>": <value>, ...} annotation
// token by token, in order (a map would lose the order and keep the last of
// duplicate names): each value's raw JSON goes to each with its name;
// duplicate names, an empty object and trailing data are errors. The
// caller bounds the size of s.
func decodeContainerObject(s string, each func(name, raw string) error) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		return fmt.Errorf("JSON: %w", err)
	}
	if t != json.Delim('{') {
		return errors.New("JSON: want an object")
	}
	seen := map[string]bool{}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return fmt.Errorf("JSON: %w", err)
		}
		name, _ := key.(string) // object keys are always strings
		if seen[name] {
			return fmt.Errorf("container %q named twice", clip(name))
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("container %q: JSON: %w", clip(name), err)
		}
		if err := each(name, string(raw)); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return fmt.Errorf("JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the object")
	}
	if len(seen) == 0 {
		return errors.New("no containers in the object")
	}
	return nil
}
