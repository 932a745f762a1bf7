package config

import (
	"fmt"
	"strings"

	"github.com/docker/go-units"
)

// ByteSize is a size in bytes, written with binary units: 512MiB, 1GiB,
// 1g, 4096 (docker's RAMInBytes rules, as `docker run --memory`).
type ByteSize int64

// ParseByteSize parses s; it must be between 0 and 1 PiB.
func ParseByteSize(s string) (ByteSize, error) {
	n, err := units.RAMInBytes(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("not a size (e.g. 512MiB, 1GiB, 0): %q", s)
	}
	if n < 0 || n > maxSize {
		return 0, fmt.Errorf("size %q out of range (0 to 1PiB)", s)
	}
	return ByteSize(n), nil
}

// String is the size in the largest binary unit that divides it.
func (b ByteSize) String() string {
	n := int64(b)
	for _, u := range []struct {
		s string
		n int64
	}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.s)
		}
	}
	return fmt.Sprintf("%d", n)
}

// Set implements pflag.Value.
func (b *ByteSize) Set(s string) error {
	n, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = n
	return nil
}

// Type implements pflag.Value (the word --help shows).
func (b *ByteSize) Type() string { return "size" }

// UnmarshalText lets viper decode the environment's and the file's text.
func (b *ByteSize) UnmarshalText(p []byte) error { return b.Set(string(p)) }
