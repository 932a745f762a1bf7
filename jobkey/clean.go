package jobkey

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/bridge-dev/bridge/internal/printable"
)

// Values from other tools (a launcher's variables, MLflow's node id, the
// host name) are not bridge's to refuse: a value a key or a node id cannot
// hold as it is is cleaned instead. Cleaning alone would map two values to
// one ("a b" and "a_b"; two ids that share their first 120 characters;
// "run-é" and "run-ü"), so a cleaned value ends in hashSep and hashDigits
// hex digits of the SHA-256 of the raw value(s). A value used as it is
// never ends like that (one that already does is cleaned too), so a
// cleaned value never equals a value used as it is, and two cleaned values
// are equal only when the raw values' hashes are.
const (
	hashSep    = "--"
	hashDigits = 10
	hashLen    = len(hashSep) + hashDigits
)

// MaxNodeID is the longest node id.
const MaxNodeID = 100

// looksHashed reports whether s ends like a cleaned value: hashSep and
// hashDigits lowercase hex digits.
func looksHashed(s string) bool {
	if len(s) < hashLen || s[len(s)-hashLen:len(s)-hashDigits] != hashSep {
		return false
	}
	for _, c := range s[len(s)-hashDigits:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// digest is hashDigits hex digits of the SHA-256 of parts, each length-
// prefixed so that no two lists of parts hash the same input.
func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(strconv.Itoa(len(p)) + ":" + p))
	}
	return hex.EncodeToString(h.Sum(nil))[:hashDigits]
}

// fits reports whether s is at most n bytes of runes ok allows.
func fits(s string, n int, ok func(rune) bool) bool {
	if len(s) > n {
		return false
	}
	for _, r := range s {
		if !ok(r) {
			return false
		}
	}
	return true
}

// scrub makes every rune of s that ok refuses (an invalid byte counts as
// one) '_', and cuts the result to n bytes; '_' must be one ok allows.
func scrub(s string, n int, ok func(rune) bool) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= n {
			break
		}
		if !ok(r) {
			r = '_'
		}
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// SegmentRune reports whether r may stand in a key segment as it is:
// letters, digits, '_', '-' and '.' (ASCII only). The W&B run id bridge
// derives from a key keeps the same set (tracker/wandb's runIDByte).
func SegmentRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
}

// NodeIDFrom maps another tool's node name (MLFLOW_SYSTEM_METRICS_NODE_ID,
// the host name) to a node id, one key segment: a valid id is used as it
// is; any other value has each character other than letters, digits,
// '_', '-' and '.' made '_', is cut to MaxNodeID-12 bytes, and gets
// hashSep and hashDigits hex digits of the raw value's SHA-256. changed
// reports the latter. "" stays "".
func NodeIDFrom(raw string) (id string, changed bool) {
	if raw == "" || ValidNodeID(raw) && !looksHashed(raw) {
		return raw, false
	}
	return scrub(raw, MaxNodeID-hashLen, SegmentRune) + hashSep + digest(raw), true
}

// field is one launcher value that goes into a key.
type field struct {
	sep  string // what comes before it in the key
	name string // the variable or option it came from
	raw  string
	max  int             // the most bytes it may take as it is
	ok   func(rune) bool // what it may hold as it is; '_' must be allowed
}

// keyOf joins prefix and fields into a key. When every field fits its
// rule, the key is their values as they are: each rule leaves out the
// separator that follows its field, so that such keys are distinct for
// distinct values. Otherwise every field is cleaned (scrub) and the key
// ends in hashSep and a digest of the raw values; changed shows the fields
// that did not fit (NAME="value").
func keyOf(prefix string, fields ...field) (key string, changed []string) {
	var b strings.Builder
	b.WriteString(prefix)
	for _, f := range fields {
		if !fits(f.raw, f.max, f.ok) {
			changed = append(changed, f.name+"="+printable.Quote(f.raw))
		}
		b.WriteString(f.sep + f.raw)
	}
	if changed == nil && !looksHashed(b.String()) {
		return b.String(), nil
	}
	if changed == nil {
		last := fields[len(fields)-1] // its value ends like a hash
		changed = []string{last.name + "=" + printable.Quote(last.raw)}
	}
	b.Reset()
	b.WriteString(prefix)
	material := []string{prefix}
	for _, f := range fields {
		b.WriteString(f.sep + scrub(f.raw, f.max, f.ok))
		material = append(material, f.name, f.raw)
	}
	return b.String() + hashSep + digest(material...), changed
}

// keyRuneBut is keyRune without the runes of not.
func keyRuneBut(not string) func(rune) bool {
	return func(r rune) bool { return keyRune(r) && !strings.ContainsRune(not, r) }
}

func digit(r rune) bool { return r >= '0' && r <= '9' }

// cleanedNote is the warning for a key built from values that did not fit.
func cleanedNote(key string, changed []string) string {
	return fmt.Sprintf("%s cannot be used as it is in a job key (letters, digits and . _ - : / @ + = only, each part of bounded length): the key is the cleaned value with a hash of the raw values, %s (docs/multinode.md)",
		strings.Join(changed, ", "), key)
}
