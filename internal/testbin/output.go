package testbin

import (
	"bytes"
	"strings"
	"sync"
	"time"
)

// Output is a running process's output (cmd.Stdout or cmd.Stderr): written
// by exec's copying goroutine while the test reads it.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// WaitFor waits until the output holds want; false after d.
func (o *Output) WaitFor(want string, d time.Duration) bool {
	for deadline := time.Now().Add(d); !strings.Contains(o.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}
